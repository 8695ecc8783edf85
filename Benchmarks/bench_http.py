"""What the benchmarks share: a JSON call to the dev coordinator, and a helper server
started the way the test fixtures start (its first line of stdout ends with its URL)."""
import json
import subprocess
import urllib.request


def http(method, url, body=None, headers=None):
    data = None if body is None else json.dumps(body).encode()
    request = urllib.request.Request(url, data=data, method=method, headers={"content-type": "application/json", **(headers or {})})
    with urllib.request.urlopen(request, timeout=30) as answer:
        return json.loads(answer.read() or b"null")


def start(args):
    """The process and the URL its first line of output ends with."""
    process = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    return process, process.stdout.readline().strip().split(" ")[-1]
