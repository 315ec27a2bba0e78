"""Lesson 00, start here: what a tensor costs to move over each link of a machine.
"""
