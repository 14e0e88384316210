"""Collection: the session, the plugin contract and registry, clocks, the recorder."""

from .plugin import Availability, Plugin, SessionContext
from .session import Session, profile

__all__ = ["Plugin", "Availability", "SessionContext", "Session", "profile"]
