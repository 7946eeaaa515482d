// The GPU of a "TF-GPU (clean restart)" kernel in JupyterLab 4 and
// Notebook 7 (docs/operating.md#what-you-see-in-jupyterlab):
//
//   - a status item for the current notebook: the GPU memory its kernel's
//     whole process tree holds ("GPU 1.5 GiB", "GPU 1.5 / 40.0 GiB" with a
//     limit), one line per device in its tooltip, asked every few seconds
//     from jupyter-resource-usage's usage endpoint; hidden for any other
//     kernel (its usage_reply has no `gpus`);
//   - a notification after Restart (the new supervisor's usage_reply
//     carries `tfgpu_release`, the release it confirmed before its kernel
//     started) and after Shut Down or a kernel's death (the supervisor
//     publishes a `tfgpu_release` message on iopub before it exits).
//
// Only the server's own endpoint is asked; nothing leaves the page.
import { JupyterFrontEnd, JupyterFrontEndPlugin } from '@jupyterlab/application';
import { Notification } from '@jupyterlab/apputils';
import { URLExt } from '@jupyterlab/coreutils';
import { INotebookTracker, NotebookPanel } from '@jupyterlab/notebook';
import { Kernel, KernelMessage, ServerConnection } from '@jupyterlab/services';
import { IStatusBar } from '@jupyterlab/statusbar';
import { Widget } from '@lumino/widgets';

import { IRelease, IUsage, isTfgpu, releaseMessage, statusText, statusTitle } from './format';

/** How often the current notebook's kernel is asked (jupyter-resource-usage's panel: 5 s). */
const POLL_MS = 5000;
/** A kernel whose reply has no GPU (another kernel, no driver) is asked less often. */
const POLL_OTHER_MS = 30000;
/** After a restart, how soon the new kernel is asked for the release it confirmed. */
const AFTER_RESTART_MS = 300;
/** How long after a restart a new release is news. */
const RESTART_NEWS_MS = 60000;

/** The status item: a text, hidden unless the kernel is a tfgpu one. */
class GPUStatus extends Widget {
  constructor() {
    super({ node: document.createElement('span') });
    this.addClass('jp-StatusBar-TextItem');
    this.addClass('tfgpu-GPUStatus');
    this.hide();
  }

  /** Shows c's figures, or hides the item when c is not a tfgpu kernel's. */
  setUsage(c: IUsage | null): void {
    if (!c || !isTfgpu(c)) {
      this.node.textContent = '';
      this.node.removeAttribute('data-tfgpu-bytes');
      this.hide();
      return;
    }
    this.node.textContent = statusText(c);
    this.node.title = statusTitle(c);
    this.node.setAttribute('data-tfgpu-bytes', String(c.gpu_memory));
    if (c.gpu_memory_limit) {
      this.node.setAttribute('data-tfgpu-limit', String(c.gpu_memory_limit));
    } else {
      this.node.removeAttribute('data-tfgpu-limit');
    }
    super.show();
  }
}

/** Asks the server's jupyter-resource-usage for a kernel's usage_reply content. */
async function getUsage(kernelId: string): Promise<IUsage | null> {
  const settings = ServerConnection.makeSettings();
  const url = URLExt.join(settings.baseUrl, 'api/metrics/v1/kernel_usage/get_usage', kernelId);
  try {
    const r = await ServerConnection.makeRequest(url, {}, settings);
    if (!r.ok) {
      return null; // no jupyter-resource-usage, or the kernel is gone
    }
    const body = await r.json();
    return (body && body.content) || null;
  } catch {
    return null; // the server is restarting, the page is leaving
  }
}

/** Shows one release once (the same release may come from iopub and usage). */
class Releases {
  private shown = new Set<string>();

  notify(r: IRelease | undefined): void {
    if (!r || !r.at || !Array.isArray(r.released) || !Array.isArray(r.held)) {
      return;
    }
    const key = r.at + ' ' + r.event;
    if (this.shown.has(key)) {
      return;
    }
    this.shown.add(key);
    const m = releaseMessage(r);
    if (!m) {
      return;
    }
    if (m.warning) {
      Notification.warning(m.text, { autoClose: false });
    } else {
      Notification.success(m.text, { autoClose: 10000 });
    }
  }
}

const plugin: JupyterFrontEndPlugin<void> = {
  id: '@tfgpu/kernel-lab:plugin',
  description: "The GPU memory of a TF-GPU (clean restart) kernel in the status bar; what Restart and Shut Down released.",
  autoStart: true,
  requires: [INotebookTracker],
  optional: [IStatusBar],
  activate: (app: JupyterFrontEnd, tracker: INotebookTracker, statusBar: IStatusBar | null) => {
    const item = new GPUStatus();
    if (statusBar) {
      statusBar.registerStatusItem('@tfgpu/kernel-lab:gpu', { item, align: 'left', rank: 100 });
    } else {
      // Notebook 7 has no status bar: its top bar, beside the kernel's name.
      item.addClass('tfgpu-GPUStatus-top');
      app.shell.add(item, 'top', { rank: 1000 });
    }
    const releases = new Releases();
    // Kernels that went through a restart, and until when a release their
    // usage_reply has not had before is news (a poll may reach the old
    // supervisor while it stops, or none while the new one starts).
    const restarted = new Map<string, number>();
    // The release each kernel's supervisor said last, so that a page
    // opened long after a restart says nothing.
    const lastAt = new Map<string, string>();
    let timer = 0;
    let gen = 0; // the poll under way; an older one still waiting drops its answer

    const kernelOf = (p: NotebookPanel | null): Kernel.IKernelConnection | null =>
      (p && !p.isDisposed && p.sessionContext.session?.kernel) || null;

    async function poll(): Promise<void> {
      window.clearTimeout(timer);
      timer = 0;
      const mine = ++gen;
      const panel = tracker.currentWidget;
      const kernel = kernelOf(panel);
      if (!panel || !kernel) {
        item.setUsage(null); // no notebook, or no kernel: nothing to ask
        return;
      }
      if (!document.hidden) {
        const c = await getUsage(kernel.id);
        if (mine !== gen || tracker.currentWidget !== panel || kernelOf(panel) !== kernel) {
          return; // a newer poll is under way (the user moved on, a restart)
        }
        item.setUsage(c);
        const r = c?.tfgpu_release;
        const news = (restarted.get(kernel.id) ?? 0) > Date.now();
        if (r && r.at !== lastAt.get(kernel.id)) {
          if (news) {
            releases.notify(r);
            restarted.delete(kernel.id);
          }
          lastAt.set(kernel.id, r.at);
        }
        if (!news) {
          restarted.delete(kernel.id);
        }
        timer = window.setTimeout(() => void poll(), isTfgpu(c) || news ? POLL_MS : POLL_OTHER_MS);
        return;
      }
      timer = window.setTimeout(() => void poll(), POLL_MS);
    }

    const soon = (ms: number) => {
      window.clearTimeout(timer);
      timer = window.setTimeout(() => void poll(), ms);
    };

    tracker.widgetAdded.connect((_, panel) => {
      const ctx = panel.sessionContext;
      ctx.statusChanged.connect((_, status) => {
        const id = ctx.session?.kernel?.id;
        if (!id) {
          return;
        }
        if (status === 'restarting' || status === 'autorestarting') {
          restarted.set(id, Date.now() + RESTART_NEWS_MS);
        } else if (status === 'idle' && restarted.has(id) && tracker.currentWidget === panel) {
          soon(AFTER_RESTART_MS);
        }
      });
      ctx.kernelChanged.connect(() => {
        if (tracker.currentWidget === panel) {
          soon(0);
        }
      });
      // Shut Down: the supervisor says what it released on iopub before
      // it exits (a kernel's death too), while the page still listens.
      ctx.iopubMessage.connect((_, msg: KernelMessage.IMessage) => {
        if (msg.header.msg_type === ('tfgpu_release' as any)) {
          releases.notify(msg.content as unknown as IRelease);
        }
      });
    });
    tracker.currentChanged.connect(() => {
      item.setUsage(null); // not the previous notebook's figures meanwhile
      soon(0);
    });
    soon(0);
  }
};

export default plugin;
