"""Screens of the ckinspect TUI, one per file."""
