"""The `embedforge` command line."""
