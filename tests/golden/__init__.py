"""Golden JSON reports of the shared real traces: per section digests that prove a refactor changes no byte."""
