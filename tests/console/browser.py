"""The console in a real browser (Debian's Chromium, driven by selenium through chromedriver),
against a local cluster that `leasehold cluster` supervises. Run by tests/cluster_command.rs:

    browser.py CONSOLE_URL LEASEHOLD_BIN ENDPOINTS SHOTS_DIR

Prints one JSON line of what it measured; exits non-zero, saying why, when the page does not do
what the issue asks: three members and one leader; a lease acquired through the CLI shown within
1 s with its token and a falling time left; the leader killed with its row's button, a new leader
shown within 2 s and the old node as down; restarted with its button, back as a follower; each
member's disk shown; the page's own node killed, links to the others' consoles, one of which
shows the cluster on.
"""

import json
import pathlib
import subprocess
import sys
import tempfile
import time

from selenium import webdriver
from selenium.webdriver.chrome.service import Service
from selenium.webdriver.common.by import By

url, binary, endpoints, shots = sys.argv[1:5]
shots = pathlib.Path(shots)
shots.mkdir(parents=True, exist_ok=True)


def browser() -> webdriver.Chrome:
    options = webdriver.ChromeOptions()
    options.binary_location = "/usr/bin/chromium"
    # Headless, and quiet: this machine reaches no network, and Chromium's background
    # connections would otherwise be refused many at a time.
    for flag in ("--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                 "--disable-background-networking", "--disable-component-update", "--disable-sync",
                 "--window-size=1400,1000", f"--user-data-dir={tempfile.mkdtemp()}"):
        options.add_argument(flag)
    return webdriver.Chrome(service=Service("/usr/bin/chromedriver"), options=options)


def until(what: str, within: float, check):
    """check()'s first truthy answer, polled every 20 ms; fails after `within` seconds."""
    deadline = time.monotonic() + within
    while True:
        try:
            found = check()
        except Exception:  # a member's row or its buttons changed under us: look again
            found = None
        if found:
            return found
        if time.monotonic() > deadline:
            sys.exit(f"the console did not show {what} within {within} s")
        time.sleep(0.02)


# The page is read in one script call where it changes under the reader: each `find_element`
# and `.text` is a round trip to the browser, and under load a row can change between them.

def members(driver):
    """Each member row's node id and what it shows (leader, follower, down...)."""
    shown = driver.execute_script("""
        return [...document.querySelectorAll("#members tbody tr")]
            .map((row) => [row.dataset.node, row.dataset.role]);""")
    return {int(node): role for node, role in shown}


def lease_row(driver, lease, mark=None):
    """The texts of the lease's row and its `kept` mark (set to `mark` first, if given), or None
    while the page shows no such row."""
    return driver.execute_script("""
        const row = [...document.querySelectorAll("#leases tbody tr")]
            .find((row) => row.dataset.lease === arguments[0]);
        if (!row) return null;
        if (arguments[1]) row.dataset.kept = arguments[1];
        return {cells: [...row.cells].map((cell) => cell.textContent), kept: row.dataset.kept};""",
        lease, mark)


def leader_of(shown):
    leaders = [node for node, role in shown.items() if role == "leader"]
    return leaders[0] if len(leaders) == 1 else None


def press(driver, node, action):
    row = driver.find_element(By.CSS_SELECTOR, f'#members tr[data-node="{node}"]')
    row.find_element(By.CSS_SELECTOR, f'button[data-action="{action}"]').click()


driver = browser()
try:
    driver.get(url)
    def three_and_a_leader():
        shown = members(driver)
        return shown if len(shown) == 3 and leader_of(shown) else None

    shown = until("three members, one of them the leader", 10, three_and_a_leader)
    leader = leader_of(shown)
    disks = [row.find_elements(By.CSS_SELECTOR, "td")[9].text
             for row in driver.find_elements(By.CSS_SELECTOR, "#members tbody tr")]
    if not all(" of " in disk and disk.endswith("%)") for disk in disks):
        sys.exit(f"the members' disk figures: {disks}")
    timing = driver.execute_script("""
        const nav = performance.getEntriesByType('navigation')[0];
        const resources = performance.getEntriesByType('resource')
            .filter((r) => r.name.includes('/ui/'));
        return {
            load_ms: nav.loadEventEnd - nav.startTime,
            bytes: nav.decodedBodySize + resources.reduce((sum, r) => sum + r.decodedBodySize, 0),
        };""")
    driver.save_screenshot(str(shots / "console-members.png"))

    subprocess.run([binary, "--endpoints", endpoints, "acquire", "console/demo", "--holder", "alice",
                    "--ttl", "30"], check=True, capture_output=True)
    # From the acquire's answer: the CLI's own start on a loaded machine is not the console's.
    sent = time.monotonic()
    def lease_shown():
        # Marked as it is first seen: the row is kept while its time left counts down (a
        # selection of its text would survive).
        row = lease_row(driver, "console/demo", mark="yes")
        return row if row and row["cells"][2] == "1" else None

    cells = until("the acquired lease with its token", 1.0, lease_shown)["cells"]
    lease_ms = (time.monotonic() - sent) * 1000
    left = float(cells[3].split()[0])
    if not 0 < left <= 30:
        sys.exit(f"the time left of a 30 s lease shows {left} s")

    def fallen():
        row = lease_row(driver, "console/demo")
        return row if row and float(row["cells"][3].split()[0]) <= left - 0.3 else None

    if until("the time left falling", 2, fallen)["kept"] != "yes":
        sys.exit("the lease's row was made anew while its time left counted down")
    driver.save_screenshot(str(shots / "console-lease.png"))

    killed = time.monotonic()
    press(driver, leader, "kill")

    def failed_over():
        s = members(driver)
        new = leader_of(s)
        return new if new not in (None, leader) and s.get(leader) == "down" else None

    new_leader = until("a new leader and the killed one down", 2.0, failed_over)
    failover_ms = (time.monotonic() - killed) * 1000
    driver.save_screenshot(str(shots / "console-failover.png"))

    press(driver, leader, "restart")
    until("the restarted node back as a follower", 15, lambda: members(driver).get(leader) == "follower")
    driver.save_screenshot(str(shots / "console-restarted.png"))

    # The page's own node killed: the page links the other members' consoles, and one of them
    # shows the cluster on, with this node down.
    own = int(driver.find_element(By.CSS_SELECTOR, '#members tr[data-self="true"]').get_attribute("data-node"))
    press(driver, own, "kill")
    links = until("links to the other members' consoles", 3, lambda: [
        a.get_attribute("href") for a in driver.find_elements(By.CSS_SELECTOR, "#elsewhere a")
    ] if driver.find_element(By.ID, "elsewhere").is_displayed() else None)
    if len(links) != 2 or url in links:
        sys.exit(f"the links to the other consoles: {links}")
    driver.save_screenshot(str(shots / "console-elsewhere.png"))
    driver.get(links[0])
    until("the other console showing this node down and a leader", 5,
          lambda: members(driver).get(own) == "down" and leader_of(members(driver)) is not None)
    print(json.dumps({"load_ms": timing["load_ms"], "page_bytes": timing["bytes"], "killed": leader,
                      "new_leader": new_leader, "lease_shown_ms": round(lease_ms),
                      "failover_shown_ms": round(failover_ms)}))
finally:
    driver.quit()
