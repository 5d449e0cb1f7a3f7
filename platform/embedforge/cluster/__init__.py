"""Starting and joining Ray clusters."""
