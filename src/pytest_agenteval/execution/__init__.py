"""Running one attempt: agents, graders, the attempt pipeline and the executor's time limits."""
