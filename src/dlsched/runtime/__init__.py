"""The runtime: a scheduler service that runs real PyTorch jobs on Ray with the simulator's
policies (``dlsched server``; docs/runtime.md)."""
