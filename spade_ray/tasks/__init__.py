"""Executable tasks: the text format generators write, parsing, validation by execution, seeds."""
