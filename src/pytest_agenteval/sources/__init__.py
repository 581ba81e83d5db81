"""Where tasks come from: finding datasets, reading and validating task files, their schemas."""
