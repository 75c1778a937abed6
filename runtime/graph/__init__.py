"""What a workflow is made of: executors, their handlers, the edges between them.

``_executor`` holds :class:`Executor` and the ``@handler`` decorators, ``_types``
reads a handler's annotation into the message types it accepts, ``_edges`` the
edges and how a send is routed along them. A new kind of edge goes here; the
builder that checks and compiles a graph is ``runtime/_builder.py``.
"""

from ._edges import Accepts, Case, Default, EdgeKind, OutEdge, passed_over, route
from ._executor import Executor, HandlerInfo, Resource, handler, resource, response_handler
from ._types import a_label, parse_type_spec, type_label

__all__ = [
    "Accepts",
    "Case",
    "Default",
    "EdgeKind",
    "Executor",
    "HandlerInfo",
    "OutEdge",
    "Resource",
    "a_label",
    "handler",
    "parse_type_spec",
    "passed_over",
    "resource",
    "response_handler",
    "route",
    "type_label",
]
