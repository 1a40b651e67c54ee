"""What sealing payloads costs (worker/payload_codec.py): CPU per claim.

    .venv/bin/python bench/seal.py [--runs 7] [--json]

A claim's payloads are those of its history: every one is sealed once by the process that
wrote it (the pool that started the claim, the worker after each activity, the trigger's
signals) and opened at least once by the worker that runs the claim (again on each replay).
Takes every payload of the committed corpus' claim histories (`tests/replay/histories/
nodeclaim-*`, recorded at 0.1.0, so as a claim writes them without keys), and times, in this
process, one seal and one open of each (`SealingCodec.encode` then `.decode`), against the same
through the compression alone (`LargePayloadCodec`, what runs without keys). Prints the CPU
microseconds per claim, sealed, unsealed and their difference: the median of `--runs` runs
and their range. Asserts only that every payload reads back.
"""

from __future__ import annotations

import argparse
import asyncio
import gzip
import json
import statistics
import time
from pathlib import Path

from google.protobuf import json_format
from temporalio.api.common.v1 import Payload
from temporalio.converter import PayloadCodec

from worker.payload_codec import (
    Keyring,
    LargePayloadCodec,
    SealingCodec,
    new_key_line,
)

ROOT = Path(__file__).resolve().parent.parent
CORPUS = ROOT / "tests" / "replay" / "histories"
# Each run goes through every claim this many times: a run of ~10 ms would measure the clock.
PASSES = 20


def claim_payloads() -> list[list[Payload]]:
    """The payloads of each claim history of the corpus."""
    claims = []
    for path in sorted(CORPUS.glob("nodeclaim-*")):
        raw = path.read_bytes()
        document = json.loads(gzip.decompress(raw) if path.suffix == ".gz" else raw)
        found: list[Payload] = []
        _collect(document, found)
        claims.append(found)
    return claims


def _collect(node: object, found: list[Payload]) -> None:
    if isinstance(node, dict):
        if "metadata" in node and "data" in node and isinstance(node["data"], str):
            found.append(json_format.ParseDict(node, Payload(), ignore_unknown_fields=True))
            return
        for child in node.values():
            _collect(child, found)
    elif isinstance(node, list):
        for child in node:
            _collect(child, found)


async def cpu_us_per_claim(codec: PayloadCodec, claims: list[list[Payload]]) -> float:
    """CPU microseconds of one encode and one decode of each claim's payloads, per claim."""
    start = time.process_time()
    for _ in range(PASSES):
        for payloads in claims:
            back = await codec.decode(await codec.encode(payloads))
            assert back == payloads
    return (time.process_time() - start) / (PASSES * len(claims)) * 1e6


async def measure(runs: int) -> dict[str, object]:
    claims = claim_payloads()
    sealing = SealingCodec(Keyring.from_text(new_key_line("bench")))
    plain = LargePayloadCodec()
    sealed_us, plain_us = [], []
    for _ in range(runs):
        sealed_us.append(await cpu_us_per_claim(sealing, claims))
        plain_us.append(await cpu_us_per_claim(plain, claims))
    extra = [s - p for s, p in zip(sealed_us, plain_us, strict=True)]
    payloads = sum(len(p) for p in claims)
    return {
        "claims": len(claims),
        "payloads_per_claim": round(payloads / len(claims), 1),
        "bytes_per_claim": round(sum(p.ByteSize() for c in claims for p in c) / len(claims)),
        "runs": runs,
        "sealed_us_per_claim": _summary(sealed_us),
        "unsealed_us_per_claim": _summary(plain_us),
        "sealing_us_per_claim": _summary(extra),
    }


def _summary(values: list[float]) -> dict[str, float]:
    return {
        "median": round(statistics.median(values), 1),
        "min": round(min(values), 1),
        "max": round(max(values), 1),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=7)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    report = asyncio.run(measure(args.runs))
    if args.json:
        print(json.dumps(report))
        return
    for key, value in report.items():
        print(f"{key}: {value}")


if __name__ == "__main__":
    main()
