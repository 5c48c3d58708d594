"""What the settings' tests share, in unit/ and e2e/: an admin token the settings accept."""

from __future__ import annotations

ADMIN_TOKEN = "0123456789abcdef" * 4
"""64 characters: BIONEMO_ADMIN_TOKEN asks for at least 32."""
