"""The test suite's payload keyring (tests/fixtures/payload-keyring): every process of every
session seals with it (tests/conftest.py puts it in CLOUDBURST_PAYLOAD_KEYRING_FILE, which
the end-to-end tests' processes inherit), so the suite runs as a deployment does, and the
replay tests' session reads the histories the end-to-end sessions handed over."""

from __future__ import annotations

from pathlib import Path

from worker.payload_codec import Keyring, data_converter

KEYRING_FILE = Path(__file__).parent / "fixtures" / "payload-keyring"
KEYRING = Keyring.from_file(KEYRING_FILE)
# What the processes use: unsealed payloads refused.
SEALED_CONVERTER = data_converter(KEYRING)
# What replays histories of both kinds: 0.1.0's corpus (unsealed, read as the rollout
# setting reads it while such workflows drain) and the sessions' (sealed).
REPLAY_CONVERTER = data_converter(KEYRING, accept_unsealed=True)
