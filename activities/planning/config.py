"""How the planning activity finds its offerings: the built-in catalog or CloudBroker.

Read from the worker's environment:
    CLOUDBURST_CLOUDBROKER_URL              use CloudBroker at this URL (unset: the catalog)
    CLOUDBURST_CLOUDBROKER_API_KEY_SECRET   "namespace/name/key" of the Secret holding the key
                                            (keep it in cloudburst-system: the worker may read
                                            Secrets there and in tenant namespaces only)
    CLOUDBROKER_API_KEY                     the key itself (when no Secret is named)
    CLOUDBURST_CLOUDBROKER_FALLBACK         "true" (default): use the catalog while it is down
    CLOUDBURST_CLOUDBROKER_TIMEOUT_S        per-request timeout, default 5
    CLOUDBURST_CATALOG                      a refreshed catalog.json instead of the shipped one
"""

from __future__ import annotations

import os
from collections.abc import Mapping

from pydantic import BaseModel, SecretStr

from api._base import SecretKeyRef


class PlanningConfig(BaseModel):
    cloudbroker_url: str | None = None
    cloudbroker_api_key: SecretStr | None = None  # SecretStr: never printed
    cloudbroker_api_key_secret: SecretKeyRef | None = None
    fallback_to_catalog: bool = True
    timeout_s: float = 5.0
    catalog_path: str | None = None

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> PlanningConfig:
        env = os.environ if env is None else env
        secret = env.get("CLOUDBURST_CLOUDBROKER_API_KEY_SECRET")
        ref = None
        if secret:
            parts = secret.split("/")
            if len(parts) != 3 or not all(parts):
                raise ValueError(
                    "CLOUDBURST_CLOUDBROKER_API_KEY_SECRET must be namespace/name/key, "
                    f"got {secret!r}"
                )
            ref = SecretKeyRef(namespace=parts[0], name=parts[1], key=parts[2])
        key = env.get("CLOUDBROKER_API_KEY")
        return cls(
            cloudbroker_url=env.get("CLOUDBURST_CLOUDBROKER_URL") or None,
            cloudbroker_api_key=SecretStr(key) if key else None,
            cloudbroker_api_key_secret=ref,
            fallback_to_catalog=env.get("CLOUDBURST_CLOUDBROKER_FALLBACK", "true").lower()
            not in ("0", "false", "no"),
            timeout_s=float(env.get("CLOUDBURST_CLOUDBROKER_TIMEOUT_S", "5")),
            catalog_path=env.get("CLOUDBURST_CATALOG") or None,
        )
