// Drives JupyterLab 4 in Debian's headless chromium, one command a line on
// stdin, one JSON answer a line on stdout ("ok" or "error"), so that the
// scenario (testdata/e2e/browser.py) checks processes, NVML and ps between
// the steps a user takes:
//
//   open URL              the launcher; click "TF-GPU (clean restart)"
//                         under Notebook; wait for the kernel to be idle
//   opennb URL            Notebook 7 instead: its tree's New → TF-GPU, in
//                         the new tab it opens
//   openpath URL          a notebook's own URL (/lab/tree/NAME.ipynb);
//                         wait for its kernel to be idle
//   runcell N             select code cell N (0 first) and run it with
//                         Shift+Enter as it is; wait for idle; its output
//   startcell N           the same, without waiting
//   waitanyoutput TEXT    until some cell's output shows TEXT; that output
//   run CODE_JSON         type the code into a new last cell, run it with
//                         Shift+Enter, wait for idle; answer its output text
//   start CODE_JSON       the same, without waiting
//   waitoutput TEXT       until the cell run last shows TEXT; its output
//   dismiss               the dialog Lab shows for a dead kernel: its text
//   restart               Kernel → Restart Kernel… → the dialog's Restart;
//                         wait for idle
//   waitidle              wait for the kernel status to read idle again
//   shutdown              Kernel → Shut Down Kernel (and its dialog)
//   gpustatus TEXT        until the GPU status item (labextension/) reads
//                         TEXT (empty: is hidden); its text, tooltip and
//                         data-tfgpu-bytes (an error naming what it read
//                         instead)
//   notification TEXT     until a notification toast shows TEXT; its text
//   shot NAME             a screenshot NAME.png in the artifacts directory
//   quit
//
// argv: ARTIFACTS_DIR. Chromium is /usr/bin/chromium, started with the
// flags this machine's closed network needs (docs/testing.md).
import { chromium } from "playwright-core";
import readline from "node:readline";
import path from "node:path";

const artifacts = process.argv[2];
const browser = await chromium.launch({
  executablePath: "/usr/bin/chromium",
  args: ["--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
    "--disable-background-networking", "--disable-component-update", "--disable-sync"],
});
const context = await browser.newContext({ viewport: { width: 1400, height: 900 } });
let page = await context.newPage();
page.setDefaultTimeout(60000);

const say = (o) => process.stdout.write(JSON.stringify(o) + "\n");

// The notebook's kernel status, from the toolbar's kernel status button
// (JupyterLab 4: "Kernel status: Idle" in its title) or the status bar.
async function kernelStatus() {
  return await page.evaluate(() => {
    const el = document.querySelector(".jp-NotebookPanel:not(.lm-mod-hidden) .jp-Toolbar-kernelStatus, .jp-NotebookPanel:not(.lm-mod-hidden) [data-jp-item-name='executionProgress'] .jp-Notebook-ExecutionIndicator");
    if (!el) return "";
    return (el.getAttribute("data-status") || el.getAttribute("title") || el.textContent || "").toLowerCase();
  });
}

async function waitIdle(timeout = 90000) {
  const t0 = Date.now();
  let s = "";
  // At least once busy or restarting is not required: an idle that stays.
  while (Date.now() - t0 < timeout) {
    s = await kernelStatus();
    if (s.includes("idle")) {
      await page.waitForTimeout(300);
      if ((await kernelStatus()).includes("idle")) return s;
    }
    await page.waitForTimeout(100);
  }
  throw new Error("kernel status not idle after " + timeout + " ms: " + JSON.stringify(s));
}

async function menu(top, item) {
  await page.locator(".lm-MenuBar-itemLabel", { hasText: new RegExp("^" + top + "$") }).click();
  await page.locator(".lm-Menu-itemLabel", { hasText: item }).first().click();
}

let lastCell = null; // the cell run last

// start types code into the last cell and runs it with Shift+Enter.
async function start(code) {
  const cells = page.locator(".jp-NotebookPanel:not(.lm-mod-hidden) .jp-Cell.jp-CodeCell");
  const n = await cells.count();
  const cell = cells.nth(n - 1);
  await cell.locator(".cm-content").click();
  await page.keyboard.press("Control+a");
  await page.keyboard.press("Delete");
  await page.keyboard.insertText(code);
  await page.keyboard.press("Shift+Enter");
  lastCell = cell;
  return cell;
}

// startCell runs code cell n as it is, with Shift+Enter from its prompt.
async function startCell(n) {
  const cell = page.locator(".jp-NotebookPanel:not(.lm-mod-hidden) .jp-Cell.jp-CodeCell").nth(n);
  await cell.locator(".jp-InputPrompt").click();
  await page.keyboard.press("Shift+Enter");
  lastCell = cell;
  return cell;
}

async function run(code) {
  const cell = await start(code);
  // Running a cell adds a new last one; wait for this one's prompt to show
  // an execution count, then for idle.
  await cell.locator(".jp-InputPrompt").filter({ hasText: /\[\d+\]/ }).waitFor({ timeout: 120000 });
  await waitIdle();
  return await cell.locator(".jp-OutputArea").innerText();
}

const commands = {
  async open(url) {
    await page.goto(url);
    const card = page.locator(".jp-LauncherCard", { hasText: "TF-GPU (clean restart)" }).first();
    await card.click();
    await page.locator(".jp-NotebookPanel .jp-Cell").first().waitFor();
    await waitIdle();
    const title = await page.locator(".jp-DirListing-item.jp-mod-running, .lm-TabBar-tab.lm-mod-current .lm-TabBar-tabLabel").first().innerText();
    return { title: title.trim() };
  },
  // opennb URL: Notebook 7's file tree; New → "TF-GPU (clean restart)"
  // opens the notebook in a new tab, which the later commands drive.
  async opennb(url) {
    await page.goto(url);
    await page.getByText("New", { exact: true }).first().click();
    const opened = context.waitForEvent("page");
    await page.locator(".lm-Menu-itemLabel", { hasText: "TF-GPU (clean restart)" }).first().click();
    page = await opened;
    page.setDefaultTimeout(60000);
    await page.locator(".jp-NotebookPanel .jp-Cell").first().waitFor();
    await waitIdle();
    return { url: page.url() };
  },
  async openpath(url) {
    await page.goto(url);
    await page.locator(".jp-NotebookPanel .jp-Cell").first().waitFor();
    await waitIdle();
    return {};
  },
  async runcell(n) {
    const cell = await startCell(Number(n));
    await cell.locator(".jp-InputPrompt").filter({ hasText: /\[\d+\]/ }).waitFor({ timeout: 120000 });
    await waitIdle();
    return { output: await cell.locator(".jp-OutputArea").innerText() };
  },
  async startcell(n) {
    await startCell(Number(n));
    return {};
  },
  async waitanyoutput(text) {
    const out = page.locator(".jp-NotebookPanel:not(.lm-mod-hidden) .jp-OutputArea", { hasText: text }).first();
    await out.waitFor({ timeout: 120000 });
    return { output: await out.innerText() };
  },
  async run(codeJSON) {
    return { output: await run(JSON.parse(codeJSON)) };
  },
  async start(codeJSON) {
    await start(JSON.parse(codeJSON));
    return {};
  },
  // waitoutput TEXT: until the last cell's output shows TEXT; its output.
  async waitoutput(text) {
    await lastCell.locator(".jp-OutputArea", { hasText: text }).waitFor({ timeout: 120000 });
    return { output: await lastCell.locator(".jp-OutputArea").innerText() };
  },
  // dismiss: the "Kernel Restarting" dialog JupyterLab shows when the
  // kernel died, answered with its button as a user does.
  async dismiss() {
    const ok = page.locator(".jp-Dialog .jp-Dialog-button.jp-mod-accept");
    try {
      await ok.waitFor({ timeout: 15000 });
    } catch {
      return { dialog: "" }; // Lab may have restarted the kernel before showing it
    }
    const text = await page.locator(".jp-Dialog").innerText();
    await ok.click();
    await ok.waitFor({ state: "detached" });
    return { dialog: text };
  },
  async restart() {
    await menu("Kernel", "Restart Kernel…");
    await page.locator(".jp-Dialog .jp-Dialog-button.jp-mod-accept").click();
    await page.waitForTimeout(200);
    return { status: await waitIdle() };
  },
  async waitidle() {
    return { status: await waitIdle() };
  },
  async shutdown() {
    await menu("Kernel", "Shut Down Kernel");
    const ok = page.locator(".jp-Dialog .jp-Dialog-button.jp-mod-accept");
    if (await ok.count()) await ok.click();
    await page.waitForTimeout(500);
    return { status: await kernelStatus() };
  },
  async gpustatus(want) {
    const t0 = Date.now();
    let got = null;
    while (Date.now() - t0 < 30000) {
      got = await page.evaluate(() => {
        const el = document.querySelector(".tfgpu-GPUStatus");
        if (!el) return null;
        return { text: el.textContent, title: el.title, bytes: el.getAttribute("data-tfgpu-bytes"),
          limit: el.getAttribute("data-tfgpu-limit"), visible: !el.classList.contains("lm-mod-hidden") && el.offsetParent !== null };
      });
      if (got && got.visible && got.text === want) return got;
      if (want === "" && got && !got.visible) return got; // "": hidden (no kernel, another kernel)
      await page.waitForTimeout(250);
    }
    throw new Error("GPU status item: want " + JSON.stringify(want) + ", got " + JSON.stringify(got));
  },
  async notification(text) {
    const toast = page.locator(".Toastify__toast", { hasText: text }).first();
    await toast.waitFor({ timeout: 30000 });
    await page.waitForTimeout(800); // its slide-in, for the screenshot
    const all = await page.locator(".Toastify__toast-body").allInnerTexts();
    return { text: (await toast.locator(".Toastify__toast-body").innerText()).trim(), all };
  },
  async shot(name) {
    const file = path.join(artifacts, name + ".png");
    await page.screenshot({ path: file });
    return { file };
  },
};

const rl = readline.createInterface({ input: process.stdin });
for await (const line of rl) {
  const sp = line.indexOf(" ");
  const cmd = sp < 0 ? line : line.slice(0, sp);
  const arg = sp < 0 ? "" : line.slice(sp + 1);
  if (cmd === "quit") break;
  try {
    const f = commands[cmd];
    if (!f) throw new Error("unknown command " + cmd);
    say({ ok: true, ...(await f(arg)) });
  } catch (e) {
    let file = "";
    try {
      file = path.join(artifacts, "error.png");
      await page.screenshot({ path: file });
    } catch {}
    say({ ok: false, error: String(e && e.stack || e), screenshot: file });
  }
}
await browser.close();
