"""Matrix: the client-server API's ``/sync`` long poll, ``m.thread`` threads, edits by
``m.replace`` (mautrix's HTTP client).

Layout: ``settings`` (``MATRIX_*``), ``plugin`` (the surface plugin, ``gateway setup
matrix``), ``extract`` (pure: one event of a sync -> Envelope | Ignored | Rejected), ``api``
(the few client-server calls, through mautrix), ``transport`` (delivery, previews, approval
cards), ``adapter`` (the sync loop, invites, rooms, the cursor).

Deliberately not handled: end-to-end encryption (an encrypted room gets one notice and is
never read), spaces, voice and video calls, read receipts.
"""

from __future__ import annotations

from adapters.matrix.plugin import plugin
from adapters.matrix.settings import MatrixSettings
from gateway.core.plugins import lazy_attributes

__all__ = ["MatrixAdapter", "MatrixSettings", "plugin"]

__getattr__ = lazy_attributes(__name__, {"MatrixAdapter": "adapters.matrix.adapter"})
