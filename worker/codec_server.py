"""A Temporal codec server for `LargePayloadCodec`: the Web UI (`TEMPORAL_CODEC_ENDPOINT`,
or the dev server's `--ui-codec-endpoint`) and `temporal workflow show --codec-endpoint`
show a compressed payload (a pool's state past ~700 claims, a burst's demand) as the JSON
it carries instead of `binary/zlib`.

The protocol (Temporal's samples-go `codec-server/protocol.md`): POST `.../decode` or
`.../encode` with a `Payloads` message as protobuf JSON, answered the same way; only the
last part of the path counts, so the server may sit under any prefix. The browser calls it
from the UI's origin, so those origins (`cors_origins`) get CORS answers.

Without payload keys it holds no secret (anyone can inflate zlib) and shows a caller only
what the caller sends it. With them (`CLOUDBURST_PAYLOAD_KEYRING_FILE`, worker/payload_codec.py)
it opens sealed payloads for the UI and `temporal workflow show`, and seals what
`temporal workflow signal|start --codec-endpoint` sends: whoever may call it can read every
history and act as our processes, so it then refuses to run without a token, and refuses every
request while the token's file is not there. Either way it spends memory and CPU, so:

- **A bearer token**, when `token_file` is set (`cloudburst codec-server --token-file`,
  or `CLOUDBURST_CODEC_TOKEN_FILE`): every request but a CORS preflight (which browsers send
  without credentials) and the kubelet's probes must carry `Authorization: Bearer <the
  file's content>`, compared in constant time, else 401. The file is read on every request,
  so a mounted Secret rotates without a restart. A file that is not there yet (the
  Deployment's optional Secret, not created) refuses every request (503) until it appears,
  said at startup: the operator named a token, so no caller without it is served; a file
  empty, unreadable, or gone once it was there refuses every request (503) too.
  `temporal workflow show --codec-auth "Bearer <token>"` sends it; the Web UI cannot (its
  `TEMPORAL_CODEC_PASS_ACCESS_TOKEN` sends the user's own login token): a proxy in front
  adds it (deploy/README.md).
- **A request's size**: a `Content-Length` over `MAX_REQUEST_BYTES` is refused (413)
  before a byte of the body is read; a body without one, by aiohttp's `client_max_size`
  once it passes the bound.
- **Work at once**: `MAX_CONCURRENT` requests read, transform and answer at a time
  (`REQUEST_PEAK_BYTES` each at most, against the container's 512 Mi); the next
  `MAX_WAITING` wait up to `WAIT_S` for their turn, any more, or longer, get 503 with
  Retry-After. They wait rather than fail at once because the UI sends one request per
  event's payloads, a page's worth together, almost all small, and shows an error as an
  empty value without asking again. A turn ends after `TURN_TIMEOUT_S` whatever the client
  does: a client that sends or reads slowly cannot keep it.
- **Inflation**: one request's payloads inflate to `MAX_DECODED_BYTES` together (400).
"""

from __future__ import annotations

import asyncio
import base64
import hmac
import json
import logging
import zlib
from collections.abc import Awaitable, Callable, Sequence
from pathlib import Path

from aiohttp import hdrs, web
from google.protobuf import json_format
from google.protobuf.message import DecodeError
from temporalio.api.common.v1 import Payload, Payloads

from worker.payload_codec import Keyring, LargePayloadCodec, PayloadTooLarge, SealingCodec

log = logging.getLogger(__name__)

# What one request may carry: a compressed payload stands for up to Temporal's 2 MB limit
# many times over; base64 in JSON adds a third.
MAX_REQUEST_BYTES = 16 * 2**20
# What one request's payloads may inflate to, together: the largest we write is a pool's
# state (~700 bytes a claim: 10,000 claims ~7 MB); zlib inflates 1,000-fold, a DoS.
MAX_DECODED_BYTES = 64 * 2**20
# What one request holds at its worst: a payload's inflated bytes and its parsed copy side
# by side, beside the request's body. The answer is written a few MB at a time.
REQUEST_PEAK_BYTES = 2 * MAX_DECODED_BYTES + MAX_REQUEST_BYTES
# What the process holds before any request (~65 MB measured), rounded up.
IDLE_BYTES = 96 * 2**20
# Requests at work at once: 96 + 2 * 144 = 384 MiB at the very worst, under the
# Deployment's 512 Mi limit (tests/deploy check it); a third would reach 528. Measured: two
# requests inflating 64 MB each peaked at 350 MB (one at 264 MB), and six sent together
# at 354 MB, where writing each answer as one JSON text took one to 395 MB and four to 920.
MAX_CONCURRENT = 2
# Requests that may wait for a turn, each holding only its socket and aiohttp's read
# buffer (its body is read once its turn comes).
MAX_WAITING = 64
# How long one waits: a turn of the largest request takes about a second.
WAIT_S = 10.0
RETRY_AFTER_S = 5
# How long a turn may last, reading the body and writing the answer included.
TURN_TIMEOUT_S = 30.0
# The kubelet's probes carry no token (a probe's headers are written in the manifest).
PROBES = ("/healthz", "/readyz")
# Raw bytes per write of a payload's data: a multiple of 3, so the pieces' base64 joins up.
_DATA_CHUNK = 3 * 2**20

_Transform = Callable[[Sequence[Payload]], Awaitable[list[Payload]]]


class TokenFileError(Exception):
    """A token file that is there but cannot serve (unreadable, or empty)."""


def codec_app(
    cors_origins: Sequence[str] = (),
    token_file: Path | None = None,
    *,
    keyring: Keyring | None = None,
    accept_unsealed: bool = False,
    tokenless_dev: bool = False,
    max_concurrent: int = MAX_CONCURRENT,
    max_waiting: int = MAX_WAITING,
    wait_s: float = WAIT_S,
    turn_timeout_s: float = TURN_TIMEOUT_S,
) -> web.Application:
    """The codec server; its bounds are keywords so that tests can make them small. With a
    keyring it seals and opens, and serves only requests carrying its token: `token_file`
    is required, and while that file is not there every request is refused. `tokenless_dev`:
    `cloudburst dev`'s, on the loopback address, whose Web UI cannot send a token."""
    if keyring is not None and token_file is None and not tokenless_dev:
        raise ValueError(
            "a codec server holding payload keys needs a token file: without one, whoever "
            "reaches it could have payloads sealed and read every history"
        )
    codec: LargePayloadCodec | SealingCodec = (
        SealingCodec(keyring, accept_unsealed, max_decoded_bytes=MAX_DECODED_BYTES)
        if keyring is not None
        else LargePayloadCodec(max_decoded_bytes=MAX_DECODED_BYTES)
    )
    allowed = set(cors_origins)
    token = BearerToken(token_file) if token_file is not None else None
    turns = _Turns(max_concurrent, max_waiting, wait_s)

    async def cors(request: web.Request, response: web.StreamResponse) -> None:
        origin = request.headers.get(hdrs.ORIGIN)
        if origin in allowed:
            response.headers[hdrs.ACCESS_CONTROL_ALLOW_ORIGIN] = origin
            response.headers[hdrs.ACCESS_CONTROL_ALLOW_METHODS] = "POST"
            # The UI sends the namespace, and its login's token when told to include them.
            response.headers[hdrs.ACCESS_CONTROL_ALLOW_HEADERS] = (
                "content-type,x-namespace,authorization"
            )
            response.headers[hdrs.ACCESS_CONTROL_ALLOW_CREDENTIALS] = "true"
            response.headers[hdrs.VARY] = "Origin"

    @web.middleware
    async def authenticate(
        request: web.Request, handler: Callable[[web.Request], Awaitable[web.StreamResponse]]
    ) -> web.StreamResponse:
        if token is None or request.method == hdrs.METH_OPTIONS or _is_probe(request):
            return await handler(request)
        try:
            expected = token.expected()
        except TokenFileError as err:
            log.error("refusing every request: the token file cannot serve: %s", err)
            return _refused(503, "the codec server cannot use its token file")
        if expected is None:
            # The operator named a token: until it is there, no caller is one it names.
            return _refused(503, "the codec server's token file is not there yet")
        if token.accepts(request.headers.get(hdrs.AUTHORIZATION), expected):
            return await handler(request)
        return _refused(
            401,
            "this codec server needs `Authorization: Bearer <token>`",
            {hdrs.WWW_AUTHENTICATE: 'Bearer realm="cloudburst-codec-server"'},
        )

    async def preflight(request: web.Request) -> web.StreamResponse:
        return web.Response()

    async def transform(request: web.Request) -> web.StreamResponse:
        action = request.path.rstrip("/").rsplit("/", 1)[-1]
        apply: _Transform | None = {"decode": codec.decode, "encode": codec.encode}.get(action)
        if apply is None:
            return web.json_response({"error": "POST .../decode or .../encode"}, status=404)
        if (request.content_length or 0) > MAX_REQUEST_BYTES:
            return _too_large()
        if not await turns.take():
            return _refused(
                503,
                f"busy: {turns.slots} requests at work and more waiting; "
                f"retry after {RETRY_AFTER_S} s",
                {hdrs.RETRY_AFTER: str(RETRY_AFTER_S)},
            )
        answer = web.StreamResponse(headers={hdrs.CONTENT_TYPE: "application/json"})
        try:
            async with asyncio.timeout(turn_timeout_s):
                return await _transformed(request, answer, action, apply)
        except TimeoutError:
            if not answer.prepared:
                return _refused(408, f"the request took over {turn_timeout_s:g} s")
            # Half an answer sent: only closing the connection can end it.
            if request.transport is not None:
                request.transport.abort()
            return answer
        finally:
            turns.give_back()

    async def healthy(request: web.Request) -> web.StreamResponse:
        return web.Response(text="ok")

    # The limit aiohttp applies to a body without a Content-Length, as it reads it.
    app = web.Application(client_max_size=MAX_REQUEST_BYTES, middlewares=[authenticate])
    app.on_response_prepare.append(cors)
    # Its Deployment's probes (deploy/components/codec-server), as the worker's and trigger's.
    app.router.add_get("/healthz", healthy)
    app.router.add_get("/readyz", healthy)
    app.router.add_route(hdrs.METH_OPTIONS, "/{tail:.*}", preflight)
    app.router.add_route(hdrs.METH_POST, "/{tail:.*}", transform)
    return app


def announce_token(path: Path | None) -> None:
    """Log whether requests need a token, as the server starts. Raises TokenFileError when
    the file is there but cannot serve, so that the server does not start."""
    if path is None:
        log.warning("no bearer token configured: every request is served")
    elif BearerToken(path).expected() is None:
        log.warning("no token at %s: every request is refused until it appears", path)
    else:
        log.info("requests must carry the bearer token in %s", path)


class BearerToken:
    """The token a request must carry, read from its file on every request."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._seen = False

    def expected(self) -> bytes | None:
        """The file's content; None while it has never been there. Raises TokenFileError
        when it cannot be read, is empty, or is gone after it was there."""
        try:
            token = self.path.read_bytes().strip()
        except FileNotFoundError:
            if not self._seen:
                return None
            raise TokenFileError(f"{self.path}: no such file (it was there)") from None
        except OSError as err:
            raise TokenFileError(f"{self.path}: {err.strerror}") from None
        if not token:
            raise TokenFileError(f"{self.path} is empty")
        self._seen = True
        return token

    def accepts(self, authorization: str | None, expected: bytes) -> bool:
        scheme, _, credentials = (authorization or "").strip().partition(" ")
        given = credentials.strip().encode("utf-8", "replace")
        # Both compared whatever the scheme: the time taken says nothing of the token.
        matches = hmac.compare_digest(given, expected)
        return scheme.lower() == "bearer" and matches


async def _transformed(
    request: web.Request, answer: web.StreamResponse, action: str, apply: _Transform
) -> web.StreamResponse:
    """`answer` written, or an error said instead, within the request's turn."""
    try:
        body = await request.read()
    except web.HTTPRequestEntityTooLarge:
        return _too_large()
    try:
        payloads = json_format.Parse(body, Payloads())
    except (json_format.ParseError, UnicodeDecodeError) as err:
        return web.json_response({"error": f"not a Payloads message: {err}"}, status=400)
    del body
    try:
        transformed = await apply(payloads.payloads)
    except (zlib.error, DecodeError, PayloadTooLarge) as err:  # cannot be shown
        return web.json_response({"error": f"cannot {action}: {err}"}, status=400)
    del payloads
    await answer.prepare(request)
    await _write_payloads(answer, transformed)
    await answer.write_eof()
    return answer


async def _write_payloads(response: web.StreamResponse, payloads: list[Payload]) -> None:
    """`Payloads` as protobuf JSON (`"payloads": []` for none: clients read the list),
    written a piece at a time: each payload is let go once written and its data goes out
    base64-encoded a few MB at a time. As one JSON text, the answer to a request inflating
    64 MB held four times that at once."""
    payloads.reverse()  # taken from the end, so that each is let go once written
    await response.write(b'{"payloads":[')
    separator = b""
    while payloads:
        payload = payloads.pop()
        data = payload.data
        payload.ClearField("data")
        fields = json.dumps(json_format.MessageToDict(payload), separators=(",", ":"))
        del payload
        if not data:  # protobuf JSON leaves an empty field out
            await response.write(separator + fields.encode())
        else:
            opening = fields[:-1] + ("," if fields != "{}" else "") + '"data":"'
            await response.write(separator + opening.encode())
            view = memoryview(data)
            for start in range(0, len(view), _DATA_CHUNK):
                await response.write(base64.b64encode(view[start : start + _DATA_CHUNK]))
            await response.write(b'"}')
        separator = b","
    await response.write(b"]}")


class _Turns:
    """`slots` requests at work at once; up to `max_waiting` more wait `wait_s` for a turn."""

    def __init__(self, slots: int, max_waiting: int, wait_s: float) -> None:
        self.slots = slots
        self._free = asyncio.Semaphore(slots)
        self._max_waiting = max_waiting
        self._waiting = 0
        self._wait_s = wait_s

    async def take(self) -> bool:
        """Whether a turn was given (then `give_back` it)."""
        if self._free.locked() and self._waiting >= self._max_waiting:
            return False
        self._waiting += 1
        try:
            async with asyncio.timeout(self._wait_s):
                await self._free.acquire()
            return True
        except TimeoutError:
            return False
        finally:
            self._waiting -= 1

    def give_back(self) -> None:
        self._free.release()


def _is_probe(request: web.Request) -> bool:
    return request.method in (hdrs.METH_GET, hdrs.METH_HEAD) and request.path in PROBES


def _too_large() -> web.StreamResponse:
    return _refused(413, f"a request may carry at most {MAX_REQUEST_BYTES // 2**20} MiB")


def _refused(status: int, why: str, headers: dict[str, str] | None = None) -> web.StreamResponse:
    """An error answered without reading the body, and the connection's last: aiohttp
    drops what still arrives of the body (for up to 10 s, so that the client reads the
    answer), never keeping it, then closes."""
    response = web.json_response({"error": why}, status=status, headers=headers)
    response.force_close()
    return response
