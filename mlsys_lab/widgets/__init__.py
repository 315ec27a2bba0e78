"""Explorers: one module per lesson, each built on :class:`mlsys_lab.widgets.base.Explorer`."""
