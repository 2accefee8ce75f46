"""A real browser page sends and receives through the WebSocket API.

Headless Chromium (the system's, e.g. Debian's ``chromium`` package; ``HORAE_CHROMIUM`` names
another binary) driven by Playwright runs a page whose script uses the browser's own
``WebSocket``: a consumer and a producer on the same topic, the token in the ``token`` query
parameter (a browser cannot set the ``Authorization`` header), the payload base64-encoded with
``btoa``, the ack sent back. Skipped, saying why, when Playwright or Chromium is missing.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Callable
from typing import Any

import pytest

from tests.ws.test_websocket_auth import SECURED, token

PAGE_TIMEOUT_MS = 20_000

#: Runs in the page: produce one message and consume it, return what each side saw.
SCRIPT = """
async ([base, topic, token]) => {
  const open = (url) => new Promise((resolve, reject) => {
    const ws = new WebSocket(url);
    ws.onopen = () => resolve(ws);
    ws.onerror = () => reject(new Error("could not open " + url));
  });
  const next = (ws) => new Promise((resolve) => {
    ws.onmessage = (event) => resolve(JSON.parse(event.data));
  });
  const q = "?token=" + encodeURIComponent(token);
  const consumer = await open(base + "/ws/v2/consumer/" + topic + "/browser-sub" + q);
  const producer = await open(base + "/ws/v2/producer/" + topic + q);
  const received = next(consumer);
  const acked = next(producer);
  producer.send(JSON.stringify({payload: btoa("hello from the browser"),
                                properties: {agent: "chromium"}, context: "page-1"}));
  const ack = await acked;
  const message = await received;
  consumer.send(JSON.stringify({messageId: message.messageId}));
  const closed = new Promise((resolve) => { consumer.onclose = (e) => resolve(e.code); });
  consumer.send(JSON.stringify({type: "isEndOfTopic"}));
  const endOfTopic = await next(consumer);
  consumer.close(1000);
  producer.close(1000);
  return {ack, message, payload: atob(message.payload), endOfTopic, closeCode: await closed};
}
"""


def _chromium() -> str | None:
    named = os.environ.get("HORAE_CHROMIUM")
    if named:
        return named if os.path.exists(named) else None
    for name in ("chromium", "chromium-browser", "google-chrome"):
        path = shutil.which(name)
        if path is not None:
            return path
    return None


async def test_browser_page_sends_and_receives(broker_factory: Callable[..., Any]) -> None:
    playwright_api = pytest.importorskip(
        "playwright.async_api", reason="Playwright is not installed (pip install playwright)")
    chromium = _chromium()
    if chromium is None:
        pytest.skip("no Chromium binary (apt-get install chromium, or set HORAE_CHROMIUM)")
    broker = broker_factory(config_overrides=dict(SECURED))
    base = broker.web_url.replace("http://", "ws://")
    async with playwright_api.async_playwright() as pw:
        browser = await pw.chromium.launch(executable_path=chromium, headless=True,
                                           args=["--no-sandbox", "--disable-gpu"])
        try:
            page = await browser.new_page()
            page.set_default_timeout(PAGE_TIMEOUT_MS)
            await page.set_content("<html><body>Horae WebSocket page</body></html>")
            result = await page.evaluate(SCRIPT, [base, "persistent/public/default/browser",
                                                  token("admin")])
        finally:
            await browser.close()
    assert result["ack"]["result"] == "ok" and result["ack"]["context"] == "page-1"
    assert result["message"]["messageId"] == result["ack"]["messageId"]
    assert result["payload"] == "hello from the browser"
    assert result["message"]["properties"] == {"agent": "chromium"}
    assert result["endOfTopic"] == {"endOfTopic": False}
    assert result["closeCode"] == 1000
