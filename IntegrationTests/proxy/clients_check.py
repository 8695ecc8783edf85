"""The real `ollama` and `openai` Python packages (and EdgeCoder's IDE router's exact calls)
against `edgecoder-worker proxy`. Prints TAP-like lines ("ok - ...", "not ok - ...") for
IntegrationTests/lib/tap.sh's run_tap.

  clients_check.py URL --record FILE   the proxy runs with --test-upstream-script (the
                                       stand-in for the Bluetooth link): exact texts, the
                                       request the worker would get, cancellations
  clients_check.py URL                 the proxy in front of a real worker (the BlueZ VM):
                                       non-empty texts; the worker's side is checked there

Used by IntegrationTests/suites/proxy-clients.sh and IntegrationTests/bluez/proxy-phase.sh.
"""
import argparse
import http.client
import json
import sys
import time
import urllib.parse

import httpx
import ollama
import openai

parser = argparse.ArgumentParser()
parser.add_argument("url")
parser.add_argument("--record", help="the stand-in upstream's record file")
parser.add_argument("--expect", default="Hello world", help="the stand-in's whole text")
parser.add_argument("--max-tokens", type=int, default=24, help="the length of answers from a real worker")
parser.add_argument("--no-worker-streaming", action="store_true",
                    help="the worker predates protocol-bluetooth §2 (no partials, no chat turns): checks that need them are skipped")
args = parser.parse_args()
URL = args.url.rstrip("/")
STAND_IN = args.record is not None
parsed = urllib.parse.urlparse(URL)
HOST, PORT = parsed.hostname, parsed.port
failed = 0


def result(ok, desc):
    global failed
    if not ok:
        failed += 1
    print(("ok - " if ok else "not ok - ") + desc, flush=True)


def check(desc, fn, needs_61=False):
    """Runs fn; ok when it returns True, not ok (with what it returned instead: the
    `condition or details` idiom) when anything else or raising. A check that needs the
    worker's protocol-bluetooth §2 (chat turns, partials) is skipped against a worker without it."""
    if needs_61 and args.no_worker_streaming:
        print(f"# SKIP needs protocol-bluetooth §2 worker: {desc}", flush=True)
        return
    try:
        value = fn()
        result(value is True, desc if value is True else f"{desc} (got {value!r})")
    except Exception as error:  # noqa: BLE001 - every failure is a result line
        result(False, f"{desc} ({type(error).__name__}: {str(error)[:300]})")


def text_ok(text):
    return text == args.expect if STAND_IN else isinstance(text, str) and len(text) > 0


def records():
    with open(args.record) as f:
        return [json.loads(line) for line in f if line.strip()]


def last_request():
    asked = [r["request"] for r in records() if r["event"] == "asked"]
    return asked[-1] if asked else None


def raw(method, path, body=None, headers=None):
    """One request with http.client (headers exactly as given); returns (status, headers, body)."""
    connection = http.client.HTTPConnection(HOST, PORT, timeout=120)
    try:
        connection.request(method, path, body=body, headers=headers or {})
        response = connection.getresponse()
        return response.status, dict(response.getheaders()), response.read()
    finally:
        connection.close()


client = ollama.Client(host=URL, timeout=300)
oa = openai.OpenAI(base_url=URL + "/v1", api_key="unused", max_retries=0, timeout=300)
small = {"num_predict": args.max_tokens}

# --- the ollama package --------------------------------------------------------------
check("ollama: generate (stream false) returns the text",
      lambda: text_ok(client.generate(model="edgecoder-bluetooth", prompt="say hello", options=small).response))


def generate_streamed():
    parts = list(client.generate(model="edgecoder-bluetooth", prompt="say hello", stream=True, options=small))
    text = "".join(p.response or "" for p in parts)
    return text_ok(text) and parts[-1].done and parts[-1].done_reason == "stop" and (len(parts) > 2 or not STAND_IN) or (len(parts), text)


check("ollama: generate (stream true) returns the text in pieces, then done", generate_streamed)
check("ollama: chat (stream false) returns the assistant's message",
      lambda: (lambda r: text_ok(r.message.content) and r.message.role == "assistant")(
          client.chat(model="edgecoder-bluetooth", messages=[{"role": "user", "content": "say hello"}], options=small)), needs_61=True)


def chat_streamed():
    parts = list(client.chat(model="edgecoder-bluetooth", messages=[{"role": "user", "content": "say hello"}], stream=True, options=small))
    text = "".join(p.message.content or "" for p in parts)
    return text_ok(text) and parts[-1].done or (len(parts), text)


check("ollama: chat (stream true) returns the message in pieces, then done", chat_streamed, needs_61=True)
check("ollama: list shows the worker as edgecoder-bluetooth",
      lambda: [m.model for m in client.list().models] == ["edgecoder-bluetooth"])
check("ollama: show describes it", lambda: client.show("edgecoder-bluetooth").details.family == "edgecoder")
check("ollama: ps shows it loaded", lambda: [m.model for m in client.ps().models] == ["edgecoder-bluetooth"])


def refused_images():
    try:
        client.generate(model="m", prompt="x", images=["aGk="])
    except ollama.ResponseError as error:
        return error.status_code == 400 and "images" in error.error or (error.status_code, error.error)
    return "accepted"


check("ollama: images are refused 400 naming the field", refused_images)

# --- the openai package --------------------------------------------------------------
messages = [{"role": "system", "content": "You are brief."}, {"role": "user", "content": "say hello"}]
check("openai: chat.completions (not streamed)",
      lambda: (lambda r: text_ok(r.choices[0].message.content) and r.choices[0].finish_reason == "stop")(
          oa.chat.completions.create(model="edgecoder-bluetooth", messages=messages, max_tokens=args.max_tokens)), needs_61=True)


def openai_chat_streamed():
    chunks = list(oa.chat.completions.create(model="edgecoder-bluetooth", messages=messages, max_tokens=args.max_tokens, stream=True))
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    return text_ok(text) and chunks[-1].choices[0].finish_reason == "stop" or (len(chunks), text)


check("openai: chat.completions (streamed, server-sent events)", openai_chat_streamed, needs_61=True)
check("openai: completions",
      lambda: text_ok(oa.completions.create(model="edgecoder-bluetooth", prompt="say hello", max_tokens=args.max_tokens).choices[0].text))
check("openai: completions (streamed)",
      lambda: text_ok("".join(c.choices[0].text for c in oa.completions.create(model="edgecoder-bluetooth", prompt="say hello",
                                                                                 max_tokens=args.max_tokens, stream=True))))
check("openai: models.list", lambda: [m.id for m in oa.models.list().data] == ["edgecoder-bluetooth"])


def openai_refused_tools():
    try:
        oa.chat.completions.create(model="m", messages=messages, tools=[{"type": "function", "function": {"name": "f", "parameters": {}}}])
    except openai.BadRequestError as error:
        return error.body.get("param") == "tools" or error.body
    return "accepted"


check("openai: tools are refused 400 with param tools", openai_refused_tools)

# --- EdgeCoder's IDE router (src/model/router.ts), its exact calls -------------------
def router_chat():
    status, _, body = raw("POST", "/api/chat", json.dumps({"messages": [{"role": "user", "content": "say hello"}], "maxTokens": args.max_tokens,
                                                           "stream": False}), {"content-type": "application/json"})
    return status == 200 and text_ok(json.loads(body)["message"]["content"]) or (status, body[:200])


def router_generate():
    status, _, body = raw("POST", "/api/generate", json.dumps({"prompt": "say hello", "maxTokens": args.max_tokens, "stream": False}),
                          {"content-type": "application/json"})
    return status == 200 and text_ok(json.loads(body)["response"]) or (status, body[:200])


check("EdgeCoder's router: POST /api/chat {messages, maxTokens, stream: false} -> message.content", router_chat, needs_61=True)
check("EdgeCoder's router: POST /api/generate {prompt, maxTokens, stream: false} -> response", router_generate)
check("HEAD / is 200 (Ollama's CLI probes it)", lambda: raw("HEAD", "/")[0] == 200)
check("GET / says Ollama is running", lambda: raw("GET", "/")[2] == b"Ollama is running")

# --- streaming: pieces as they come, not one buffered answer; keep-alive -------------
# Behaviour, not speed (the speed is `make bench`'s): a proxy that buffered the answer would
# hand every piece over at once, at the end; a streaming one hands the first over well
# before the last (at least 200 ms on a 1000-token answer, which takes seconds to cross
# the Bluetooth link, and the stand-in's scripted pieces come 0.3 s apart).
def first_piece_early():
    started = time.monotonic()
    first, pieces = None, 0
    with httpx.stream("POST", URL + "/api/generate", json={"model": "m", "prompt": "count slowly", "options": {"num_predict": max(args.max_tokens, 1000)}},
                      timeout=300) as response:
        for line in response.iter_lines():
            if line and json.loads(line).get("response"):
                pieces += 1
                if first is None:
                    first = time.monotonic() - started
    whole = time.monotonic() - started
    print(f"# first piece after {first * 1000:.0f} ms, whole answer after {whole * 1000:.0f} ms, {pieces} pieces", flush=True)
    return first is not None and pieces >= 2 and first + 0.2 <= whole or (first, whole, pieces)


check("a streamed answer comes in pieces, the first well before the end", first_piece_early, needs_61=True)


def keep_alive():
    connection = http.client.HTTPConnection(HOST, PORT, timeout=60)
    sockets = set()
    for _ in range(3):
        connection.request("GET", "/api/tags")
        response = connection.getresponse()
        response.read()
        sockets.add(id(connection.sock))
        if response.status != 200:
            return response.status
    connection.close()
    return len(sockets) == 1 or f"{len(sockets)} connections for 3 requests"


check("three requests on one kept-alive connection", keep_alive)

# --- a client that goes away mid-stream ----------------------------------------------
def departing_client():
    with httpx.stream("POST", URL + "/api/chat", json={"model": "m", "messages": [{"role": "user", "content": "a long answer please"}],
                                                       "options": {"num_predict": 2000}}, timeout=300) as response:
        for line in response.iter_lines():
            if line and json.loads(line).get("message", {}).get("content"):
                break
    if not STAND_IN:
        return True
    for _ in range(100):
        if any(r["event"] == "cancelled" for r in records()):
            return True
        time.sleep(0.05)
    return "the stand-in recorded no cancellation"


check("a client that disconnects mid-stream cancels its request" + (" (the stand-in records it)" if STAND_IN else ""), departing_client)

# --- browsers ------------------------------------------------------------------------
check("a foreign Origin gets 403",
      lambda: raw("POST", "/api/generate", '{"prompt":"x"}', {"Origin": "https://evil.example", "Content-Type": "text/plain"})[0] == 403)
check("a rebinding Host gets 403", lambda: raw("GET", "/status", None, {"Host": f"rebind.evil.example:{PORT}"})[0] == 403)
check("a loopback Origin is served with CORS headers",
      lambda: (lambda s, h, b: s == 200 and h.get("Access-Control-Allow-Origin") == "http://localhost:5173")(
          *raw("GET", "/api/tags", None, {"Origin": "http://localhost:5173"})))

# --- hostile input -------------------------------------------------------------------
check("huge messages are refused (413)",
      lambda: raw("POST", "/api/chat", json.dumps({"model": "m", "messages": [{"role": "user", "content": "a" * 2_000_000}]}))[0] == 413)
check("deep nesting is refused (400)", lambda: raw("POST", "/api/chat", "[" * 100_000)[0] == 400)


def bad_type():
    status, _, body = raw("POST", "/v1/chat/completions", json.dumps({"model": "m", "messages": [{"role": "user", "content": "x"}], "temperature": "hot"}))
    return status == 400 and json.loads(body)["error"]["param"] == "temperature" or (status, body[:200])


check("a bad type is 400 naming the field", bad_type)
check("too many turns are 400", lambda: raw("POST", "/api/chat", json.dumps({"model": "m", "messages": [{"role": "user", "content": "x"}] * 600}))[0] == 400)

# --- what the worker gets (stand-in only) ---------------------------------------------
if STAND_IN:
    def mapped():
        client.chat(model="m", messages=[{"role": "system", "content": "s"}, {"role": "user", "content": "u"}], format="json",
                    options={"temperature": 0.25, "top_p": 0.5, "top_k": 7, "seed": 3, "stop": ["END"], "num_ctx": 2048, "num_predict": -1})
        request = last_request()
        return (request["messages"] == [{"role": "system", "content": "s"}, {"role": "user", "content": "u"}] and request["format"] == "json"
                and request["options"] == {"temperature": 0.25, "top_p": 0.5, "top_k": 7, "seed": 3, "stop": ["END"], "num_ctx": 2048}
                and request["maxTokens"] == 32768 and "stream" not in request) or request

    check("ollama's format, options and num_predict -1 reach the worker as protocol-bluetooth §2 keys (the worker's cap)", mapped)

    def openai_mapped():
        list(oa.chat.completions.create(model="m", messages=[{"role": "developer", "content": "d"}, {"role": "user", "content": "u"}], max_tokens=77,
                                        temperature=0.5, stop="STOP", seed=9, stream=True))
        request = last_request()
        return (request["messages"][0] == {"role": "system", "content": "d"} and request["maxTokens"] == 77 and request["stream"] is True
                and request["options"] == {"temperature": 0.5, "seed": 9, "stop": ["STOP"]}) or request

    check("openai's parameters reach the worker (developer as system, max_tokens, stream)", openai_mapped)

    def failure_in_stream():
        try:
            list(client.chat(model="m", messages=[{"role": "user", "content": "FAIL please"}], stream=True))
        except ollama.ResponseError as error:
            return "model_unavailable" in error.error or error.error
        return "no error"

    check("a failing worker is an error to the ollama package, streamed too", failure_in_stream)

sys.exit(1 if failed else 0)
