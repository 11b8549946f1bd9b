#!/usr/bin/env python3
"""A fake OpenAI-compatible provider for the manual's getting-started walk.

It answers as a real server would (OpenAI's chat completions and
embeddings; Anthropic's messages and Ollama's chat for the SDK snippets of
docs/snippets), and lets the request's `model` choose what
kind of answer comes back, so every case probity judges can be seen:

  sound       a well-formed answer
  sloppy      `usage.prompt_tokens` is the string "12" (a malformed figure)
  confused    `reasoning_tokens` above `completion_tokens` (figures that
              contradict each other)
  short       (embeddings) one vector fewer than the inputs (a corrupt payload)

Standard library only: `python3 fake_provider.py 127.0.0.1:8000`.
"""

import json
import sys
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

CHAT = (
    '{"id":"chatcmpl-walk","object":"chat.completion","created":1765000000,'
    '"model":"%(model)s","choices":[{"index":0,"message":{"role":"assistant",'
    '"content":"Hello! How can I help?"},"finish_reason":"stop"}],'
    '"usage":%(usage)s}'
)

USAGE = {
    "sound": '{"prompt_tokens":12,"completion_tokens":7,"total_tokens":19}',
    "sloppy": '{"prompt_tokens":"12","completion_tokens":7,"total_tokens":19}',
    "confused": '{"prompt_tokens":12,"completion_tokens":7,"total_tokens":19,'
    '"completion_tokens_details":{"reasoning_tokens":40}}',
}


def chat(request):
    model = request.get("model", "sound")
    usage = USAGE.get(model, USAGE["sound"])
    return CHAT % {"model": model, "usage": usage}


def embeddings(request):
    inputs = request.get("input", [])
    count = 1 if isinstance(inputs, str) else len(inputs)
    if request.get("model") == "short":
        count -= 1
    data = ",".join(
        '{"object":"embedding","index":%d,"embedding":[0.25,-0.5,0.125]}' % i
        for i in range(count)
    )
    return (
        '{"object":"list","data":[%s],"model":"%s",'
        '"usage":{"prompt_tokens":%d,"total_tokens":%d}}'
        % (data, request.get("model", "sound"), count * 2, count * 2)
    )


def messages(request):
    """Anthropic's Messages API, for the manual's SDK snippets."""
    return (
        '{"id":"msg_walk","type":"message","role":"assistant","model":"%s",'
        '"content":[{"type":"text","text":"Hello! How can I help?"}],'
        '"stop_reason":"end_turn","stop_sequence":null,'
        '"usage":{"input_tokens":12,"output_tokens":7}}' % request.get("model", "sound")
    )


def ollama_chat(request):
    """Ollama's own /api/chat, answered whole."""
    return (
        '{"model":"%s","created_at":"2026-12-06T12:00:00Z",'
        '"message":{"role":"assistant","content":"Hello! How can I help?"},'
        '"done_reason":"stop","done":true,"total_duration":812000000,'
        '"prompt_eval_count":12,"eval_count":7}' % request.get("model", "sound")
    )


ANSWERS = {
    "/v1/chat/completions": chat,
    "/v1/embeddings": embeddings,
    "/v1/messages": messages,
    "/api/chat": ollama_chat,
}


class Provider(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def do_GET(self):
        if self.path == "/v1/models":
            self.send(200, '{"object":"list","data":[{"id":"sound","object":"model"}]}')
        else:
            self.send(404, '{"error":{"message":"no such path","type":"invalid_request_error"}}')

    def do_POST(self):
        length = int(self.headers.get("content-length", "0"))
        try:
            request = json.loads(self.rfile.read(length) or b"{}")
        except ValueError:
            request = {}
        answer = ANSWERS.get(self.path)
        if answer is None:
            self.send(404, '{"error":{"message":"no such path","type":"invalid_request_error"}}')
        else:
            self.send(200, answer(request))

    def send(self, status, body):
        data = body.encode()
        self.send_response(status)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, *args):
        pass


if __name__ == "__main__":
    host, port = (sys.argv[1] if len(sys.argv) > 1 else "127.0.0.1:8000").rsplit(":", 1)
    ThreadingHTTPServer((host, int(port)), Provider).serve_forever()
