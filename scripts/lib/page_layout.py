#!/usr/bin/env python3
"""Measures a page's layout in headless Chromium: prints one JSON object per viewport, e.g.
{"width": 390, "height": 844, "innerWidth": 390, "scrollWidth": 390, "overflowing": [], "domContentLoadedMs": 35}
(domContentLoadedMs: from the navigation's start to the end of DOMContentLoaded, as the page's Navigation Timing
entry has it: the request, the response and the parse of the whole document)

usage: page_layout.py CHROMIUM URL WIDTHxHEIGHT [WIDTHxHEIGHT ...]

It speaks the DevTools protocol over --remote-debugging-pipe (file descriptors 3 and 4, messages ending in a NUL
byte), so it needs nothing beyond the standard library and adds no script to the page: the page's own
Content-Security-Policy stays in force, and the measurement runs in DevTools' evaluation context. Each viewport is
emulated as a phone or desktop would present it (Emulation.setDeviceMetricsOverride, `mobile` below 600 px so the
page's viewport meta applies), then the page is loaded and, after its load event, measured.
"""
import json
import os
import subprocess
import sys
import tempfile
import time

MEASURE = r"""JSON.stringify((() => {
  const width = document.documentElement.clientWidth;
  const overflowing = [];
  for (const element of document.querySelectorAll('body *')) {
    const box = element.getBoundingClientRect();
    if (box.right > width + 0.5 && !element.closest('.scroll')) {
      const name = typeof element.className === 'string' && element.className ? '.' + element.className : '';
      overflowing.push(element.tagName.toLowerCase() + name + ' right=' + Math.round(box.right));
      if (overflowing.length >= 5) break;
    }
  }
  const navigation = performance.getEntriesByType('navigation')[0];
  return {innerWidth: window.innerWidth, clientWidth: width, scrollWidth: document.documentElement.scrollWidth,
          bodyScrollWidth: document.body.scrollWidth, overflowing,
          domContentLoadedMs: navigation ? Math.round(navigation.domContentLoadedEventEnd) : null};
})())"""


class Pipe:
    def __init__(self, to_browser, from_browser):
        self.to_browser = to_browser
        self.from_browser = from_browser
        self.buffer = b""
        self.next_id = 0

    def send(self, method, params=None, session=None):
        self.next_id += 1
        message = {"id": self.next_id, "method": method, "params": params or {}}
        if session:
            message["sessionId"] = session
        os.write(self.to_browser, json.dumps(message).encode() + b"\0")
        return self.next_id

    def read(self, deadline):
        while b"\0" not in self.buffer:
            if time.monotonic() > deadline:
                raise TimeoutError("chromium did not answer in time")
            chunk = os.read(self.from_browser, 1 << 16)
            if not chunk:
                raise EOFError("chromium closed the DevTools pipe")
            self.buffer += chunk
        message, self.buffer = self.buffer.split(b"\0", 1)
        return json.loads(message)

    def call(self, method, params=None, session=None, deadline=None):
        wanted = self.send(method, params, session)
        while True:
            message = self.read(deadline)
            if message.get("id") == wanted:
                if "error" in message:
                    raise RuntimeError(f"{method}: {message['error']}")
                return message.get("result", {})

    def wait_event(self, name, session, deadline):
        while True:
            message = self.read(deadline)
            if message.get("method") == name and message.get("sessionId") == session:
                return message


def main():
    if len(sys.argv) < 4:
        sys.exit(__doc__)
    chromium, url, sizes = sys.argv[1], sys.argv[2], sys.argv[3:]
    profile = tempfile.mkdtemp(prefix="ferry-chromium-layout-")
    child_in, to_browser = os.pipe()
    from_browser, child_out = os.pipe()

    def descriptors():
        # Copies first, so that neither pipe end is overwritten by the other when one is already 3 or 4; os.dup2
        # makes 3 and 4 inheritable (os.pipe's ends are close-on-exec).
        reading, writing = os.dup(child_in), os.dup(child_out)
        os.dup2(reading, 3)
        os.dup2(writing, 4)

    browser = subprocess.Popen(
        [chromium, "--headless", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--no-first-run",
         "--no-default-browser-check", "--disable-extensions", "--disable-background-networking", "--hide-scrollbars",
         f"--user-data-dir={profile}", "--remote-debugging-pipe", "about:blank"],
        stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, preexec_fn=descriptors,
        close_fds=False)
    os.close(child_in)
    os.close(child_out)
    pipe = Pipe(to_browser, from_browser)
    try:
        deadline = time.monotonic() + 60
        for size in sizes:
            width, height = (int(part) for part in size.split("x"))
            target = pipe.call("Target.createTarget", {"url": "about:blank"}, deadline=deadline)["targetId"]
            session = pipe.call("Target.attachToTarget", {"targetId": target, "flatten": True}, deadline=deadline)["sessionId"]
            pipe.call("Emulation.setDeviceMetricsOverride",
                      {"width": width, "height": height, "deviceScaleFactor": 1, "mobile": width < 600}, session, deadline)
            pipe.call("Page.enable", {}, session, deadline)
            pipe.call("Page.navigate", {"url": url}, session, deadline)
            pipe.wait_event("Page.loadEventFired", session, deadline)
            result = pipe.call("Runtime.evaluate", {"expression": MEASURE, "returnByValue": True}, session, deadline)
            measured = json.loads(result["result"]["value"])
            print(json.dumps({"width": width, "height": height, **measured}), flush=True)
            pipe.call("Target.closeTarget", {"targetId": target}, deadline=deadline)
        pipe.send("Browser.close")
    finally:
        try:
            browser.wait(timeout=10)
        except subprocess.TimeoutExpired:
            browser.kill()
            browser.wait()
        subprocess.run(["rm", "-rf", profile], check=False)


if __name__ == "__main__":
    main()
