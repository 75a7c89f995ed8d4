"""Intake: the paths handed in to one folder per student."""
