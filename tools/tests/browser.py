"""Opens a page in headless Chromium (Debian's chromium and chromium-driver,
through Selenium) and reports what a user's browser would: console errors,
every request the page made, what each chart drew, and a screenshot.

    python3 tools/tests/browser.py PAGE.html [SCREENSHOT.png]

prints that as JSON (and writes the full-page screenshot). tools/setup
installs chromium and chromium-driver for the report's browser test;
unavailable() says why a test must skip where they are not.
"""
import base64
import json
import os
import shutil
import sys

CHROMIUM = ("chromium", "chromium-browser", "google-chrome")
DRIVER = ("chromedriver",)

# What each chart drew: per section, the points (or bars) of its datasets
# that stand for benchmarks, counted from Chart.js's own layout of them
# (elements with finite pixel positions inside the chart area).
COUNT_DRAWN = """
const out = {charts: 0, sections: {}};
for (const chart of Object.values(window.ltbCharts || {})) {
  out.charts += 1;
  const section = chart.canvas.dataset.section;
  const area = chart.chartArea;
  let n = 0;
  chart.data.datasets.forEach((d, i) => {
    if (d.ltbKind !== 'benchmarks') return;
    for (const e of chart.getDatasetMeta(i).data) {
      if (!e.skip && Number.isFinite(e.x) && Number.isFinite(e.y) &&
          e.x >= area.left - 1 && e.x <= area.right + 1 &&
          e.y >= area.top - 1 && e.y <= area.bottom + 1) n += 1;
    }
  });
  out.sections[section] = (out.sections[section] || 0) + n;
}
out.canvases = document.querySelectorAll('canvas').length;
return out;
"""


def find(names):
    for name in names:
        path = shutil.which(name) or (f"/usr/bin/{name}" if os.path.exists(f"/usr/bin/{name}")
                                      else None)
        if path:
            return path
    return None


def unavailable():
    """Why a browser test cannot run here, or None when it can."""
    try:
        import selenium  # noqa: F401
    except ImportError:
        return "selenium is not installed (tools/setup installs tools/requirements.txt)"
    if not find(CHROMIUM):
        return "no chromium (tools/setup installs Debian's chromium and chromium-driver)"
    if not find(DRIVER):
        return "no chromedriver (tools/setup installs Debian's chromium-driver)"
    return None


def open_page(path, screenshot=None, width=1300):
    """{"console_errors", "requests", "drawn", "title"} of the page at path,
    and its full-page screenshot written to screenshot when given."""
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = find(CHROMIUM)
    for arg in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                "--disable-background-networking", "--disable-extensions",
                "--no-first-run", f"--window-size={width},1000", "--hide-scrollbars"):
        options.add_argument(arg)
    options.set_capability("goog:loggingPrefs", {"browser": "ALL", "performance": "ALL"})
    driver = webdriver.Chrome(service=Service(find(DRIVER)), options=options)
    try:
        url = "file://" + os.path.abspath(path)
        driver.get(url)
        drawn = driver.execute_script(COUNT_DRAWN)
        console = [e for e in driver.get_log("browser") if e.get("level") == "SEVERE"]
        requests = []
        for entry in driver.get_log("performance"):
            message = json.loads(entry["message"])["message"]
            if message.get("method") == "Network.requestWillBeSent":
                requests.append(message["params"]["request"]["url"])
        if screenshot:
            height = driver.execute_script(
                "return Math.ceil(document.documentElement.scrollHeight)")
            shot = driver.execute_cdp_cmd("Page.captureScreenshot", {
                "format": "png", "captureBeyondViewport": True,
                "clip": {"x": 0, "y": 0, "width": width, "height": height, "scale": 1}})
            with open(screenshot, "wb") as f:
                f.write(base64.b64decode(shot["data"]))
        return {"console_errors": [e["message"] for e in console], "requests": requests,
                "drawn": drawn, "title": driver.title, "url": url}
    finally:
        driver.quit()


if __name__ == "__main__":
    why = unavailable()
    if why:
        sys.exit(f"browser: {why}")
    print(json.dumps(open_page(sys.argv[1], sys.argv[2] if len(sys.argv) > 2 else None),
                     indent=2))
