"""One anywidget class per view."""

from .graph import GraphWidget

__all__ = ["GraphWidget"]
