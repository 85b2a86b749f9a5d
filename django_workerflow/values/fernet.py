"""The built-in codec of sensitive values at rest: Fernet (AES-128-CBC with an HMAC-SHA256,
from the ``cryptography`` package, installed by ``pip install django-workerflow[encryption]``).

``WORKERFLOW_FERNET_KEYS`` lists the keys, newest first (``Fernet.generate_key()`` makes
one): values are sealed with the first and opened with whichever key sealed them, so a key
is rotated by putting the new one first, running ``manage.py workerflow reseal``, and then
dropping the old one.
"""

from __future__ import annotations

from typing import Any

from django_workerflow.conf import settings
from django_workerflow.exceptions import WorkflowStateError

MISSING_EXTRA = (
    "The Fernet codec needs the `cryptography` package: pip install "
    "'django-workerflow[encryption]'."
)


class FernetCodec:
    """Seals with the first of ``WORKERFLOW_FERNET_KEYS``, opens with any of them."""

    def __init__(self) -> None:
        try:  # late: the encryption extra is optional, and a project without it imports us
            from cryptography.fernet import Fernet, MultiFernet
        except ImportError:
            raise WorkflowStateError(MISSING_EXTRA) from None
        keys = settings.FERNET_KEYS
        if not keys or isinstance(keys, str):
            raise WorkflowStateError(
                "WORKERFLOW_PAYLOAD_CODEC names the Fernet codec but WORKERFLOW_FERNET_KEYS "
                "is not a list of keys: set it to [Fernet.generate_key().decode()], newest "
                "first."
            )
        try:
            self._fernet: Any = MultiFernet([Fernet(key) for key in keys])
        except ValueError as exc:
            raise WorkflowStateError(
                f"A key of WORKERFLOW_FERNET_KEYS is not a Fernet key ({exc}): make one with "
                "Fernet.generate_key()."
            ) from None

    def encode(self, text: str) -> str:
        token: bytes = self._fernet.encrypt(text.encode())
        return token.decode("ascii")

    def decode(self, text: str) -> str:
        from cryptography.fernet import InvalidToken  # the class exists once __init__ ran

        try:
            plain: bytes = self._fernet.decrypt(text.encode("ascii"))
        except InvalidToken:
            raise ValueError("no key of WORKERFLOW_FERNET_KEYS opens it") from None
        return plain.decode()
