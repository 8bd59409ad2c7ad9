"""The entrypoint's source, one job per module: entrypoint/assemble.py makes the shipped file."""
