"""The control plane: admission, routing, reallocation, replay and the command line."""
