"""The built-in web chat surface (platform ``web``)."""

from adapters.web.adapter import WebAdapter

__all__ = ["WebAdapter"]
