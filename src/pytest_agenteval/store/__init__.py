"""Runs on disk: the append-only run store, a run's lifecycle, and the resume plan."""
