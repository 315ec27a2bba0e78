"""Instructor tools: executing notebooks, student versions, grading."""
