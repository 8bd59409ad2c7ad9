"""The run's secret on Kubernetes: derived from the user's kgen key, never stored in kgen's files.

Every node's entrypoint proves membership on the liveness channel with the run's secret (the file
named by KGEN_SECRET_FILE; docs/entrypoint.md, "Security"). `kgen render` emits it as a Secret:

    secret(run) = HMAC-SHA256(user key, "kgen run secret v1 <namespace>/<name>"), 64 hex characters

The user key is 32 random bytes (hex) in a file created 0600 on first use: ``$KGEN_KEY_FILE``, else
``$XDG_CONFIG_HOME/kgen/run-key`` (``~/.config/kgen/run-key``). So rendering stays deterministic
(goldens, ``git diff`` of manifests), re-rendering and re-applying a run gives the same Secret (a
replacement pod still joins), two runs or two users get different secrets, and ``kgen render |
kubectl apply -f -`` stays one step. Values ``auth.secretName`` names a Secret the user manages
instead (then none is rendered).
"""

from __future__ import annotations

import base64
import errno
import hmac
import os
import secrets
import stat
from pathlib import Path

from kgen.errors import UsageError

KEY_ENV = "KGEN_KEY_FILE"
KEY_MIN = 32  # characters of a key file (after stripping whitespace)
KEY_MAX = 4096  # bytes read from a key file
SECRET_KEY = "secret"  # the data key in the Secret (rendered or named by auth.secretName)
SECRET_DIR = "/var/run/secrets/kgen"  # where the pods mount it, read-only
SECRET_FILE = f"{SECRET_DIR}/{SECRET_KEY}"  # KGEN_SECRET_FILE in the pods
HINT = f"set {KEY_ENV} to a readable key file, or values auth.secretName to a Secret you created (README, Security)"


def key_path() -> Path:
    explicit = os.environ.get(KEY_ENV)
    if explicit:
        return Path(explicit)
    xdg = os.environ.get("XDG_CONFIG_HOME")
    base = Path(xdg) if xdg and os.path.isabs(xdg) else Path.home() / ".config"
    return base / "kgen" / "run-key"


def _read_key(path: Path) -> bytes:
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
    except OSError as exc:
        raise UsageError(f"cannot read the run key {path} ({exc.strerror})", option=KEY_ENV, hint=HINT) from None
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise UsageError(f"the run key {path} is not a regular file", option=KEY_ENV, hint=HINT)
        data = os.read(fd, KEY_MAX + 1)
    except OSError as exc:
        raise UsageError(f"cannot read the run key {path} ({exc.strerror})", option=KEY_ENV, hint=HINT) from None
    finally:
        os.close(fd)
    key = data.strip()
    if len(data) > KEY_MAX or len(key) < KEY_MIN:
        raise UsageError(
            f"the run key {path} must hold {KEY_MIN} to {KEY_MAX} characters, it holds {len(key)}",
            option=KEY_ENV,
            hint="e.g. python3 -c 'import secrets; print(secrets.token_hex(32))' > FILE; chmod 600 FILE; "
            "or values auth.secretName",
        )
    return key


def user_key() -> bytes:
    """The user's kgen key; created (0600, in a 0700 folder) on first use when the default file is missing."""
    path = key_path()
    if not path.exists() and not os.environ.get(KEY_ENV):
        try:
            path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        except FileExistsError:
            pass  # another kgen created it meanwhile: read that one
        except OSError as exc:
            raise UsageError(
                f"cannot create the run key {path} ({exc.strerror or errno.errorcode.get(exc.errno or 0, exc)})",
                option=KEY_ENV,
                hint=HINT,
            ) from None
        else:
            with os.fdopen(fd, "w") as fh:
                fh.write(secrets.token_hex(32) + "\n")
    return _read_key(path)


def derive(key: bytes, namespace: str, name: str) -> str:
    """The run's secret: 64 hex characters, a pure function of the key and the run's namespace/name."""
    return hmac.new(key, f"kgen run secret v1 {namespace}/{name}".encode(), "sha256").hexdigest()


def secret_data(namespace: str, name: str) -> str:
    """The Secret's `data.secret` value (base64) for the run ``namespace/name`` with this user's key."""
    return base64.b64encode(derive(user_key(), namespace, name).encode()).decode()
