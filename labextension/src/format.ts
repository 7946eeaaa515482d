// What the supervisor says (docs/operating.md#usage-in-the-notebook), in
// the words the status bar and the notifications use. Pure functions, no
// JupyterLab import, so that they read the same in Lab and Notebook 7.

/** One device in a usage_reply's `gpus`. */
export interface IGPU {
  index: number;
  uuid?: string;
  name?: string;
  total_bytes?: number;
  used_bytes: number; // the kernel's tree's; -1 when NVML gives no figure
}

/** The GPUs --gpus auto gave the kernel: a usage_reply's `gpu_placement`. */
export interface IPlacement {
  asked: string; // "auto", "auto:2,min-free=20G"
  visible: string; // the kernel's CUDA_VISIBLE_DEVICES
  explicit?: boolean; // CUDA_VISIBLE_DEVICES was set before the start
  enough: boolean;
  gpus?: { index: number; mig?: number; free_bytes: number; total_bytes: number }[];
  why?: string;
}

/** The supervisor's fields of a usage_reply (the kernel's are ignored). */
export interface IUsage {
  gpu_memory?: number;
  gpus?: IGPU[];
  gpu_memory_limit?: number;
  gpu_placement?: IPlacement;
  tfgpu_release?: IRelease;
}

/** The last GPU release a supervisor confirmed: `tfgpu_release`. */
export interface IRelease {
  event: string; // "restart", "shutdown", or why the kernel stopped
  at: string; // RFC 3339
  confirmed: boolean;
  released: { index: number; bytes: number }[];
  held: { index: number; bytes: number; pids: number[] }[];
  took_ms: number;
  error?: string;
}

/** Whether a usage_reply's content is a tfgpu kernel's with the GPU checked. */
export function isTfgpu(c: IUsage | undefined | null): boolean {
  return !!c && Array.isArray(c.gpus) && typeof c.gpu_memory === 'number';
}

/**
 * Bytes as the supervisor writes them ("512 MiB", "1.0 GiB"): GiB with
 * one decimal from 1 GiB on, whole MiB below, "?" when NVML has no figure.
 */
export function formatBytes(n: number): string {
  if (n < 0) {
    return '?';
  }
  const gib = n / 2 ** 30;
  if (gib >= 1) {
    return (gib >= 100 ? Math.round(gib).toString() : gib.toFixed(1)) + ' GiB';
  }
  return Math.round(n / 2 ** 20) + ' MiB';
}

/** The status bar's text: "GPU 1.5 GiB", or "GPU 1.5 / 40.0 GiB" with a limit. */
export function statusText(c: IUsage): string {
  const used = c.gpu_memory ?? 0;
  if (c.gpu_memory_limit && c.gpu_memory_limit > 0) {
    const unit = (n: number) => formatBytes(n).split(' ');
    const [u, uUnit] = unit(used);
    const [l, lUnit] = unit(c.gpu_memory_limit);
    return uUnit === lUnit ? `GPU ${u} / ${l} ${lUnit}` : `GPU ${u} ${uUnit} / ${l} ${lUnit}`;
  }
  return 'GPU ' + formatBytes(used);
}

/** The status item's tooltip: one line per device. */
export function statusTitle(c: IUsage): string {
  const lines = (c.gpus ?? []).map(g => {
    const total = g.total_bytes ? ' of ' + formatBytes(g.total_bytes) : '';
    return `GPU${g.index} ${g.name ?? ''}: ${formatBytes(g.used_bytes)}${total}`.replace(/ {2,}/g, ' ');
  });
  if (c.gpu_memory_limit) {
    lines.push('limit ' + formatBytes(c.gpu_memory_limit) + ' (all GPUs)');
  }
  const p = placementLine(c.gpu_placement);
  if (p) {
    lines.push(p);
  }
  lines.push("this kernel's whole process tree (tfgpu-kernel)");
  return lines.join('\n');
}

/**
 * What --gpus auto gave the kernel, for the tooltip: "on GPU1, chosen by
 * --gpus auto (140.0 GiB free then)"; null without a placement.
 */
export function placementLine(p: IPlacement | undefined): string | null {
  if (!p) {
    return null;
  }
  if (p.explicit) {
    return `CUDA_VISIBLE_DEVICES=${p.visible}, set before the start (--gpus ${p.asked} chose nothing)`;
  }
  const gpus = p.gpus ?? [];
  if (gpus.length === 0) {
    return `--gpus ${p.asked} chose no GPU` + (p.why ? ` (${p.why})` : '');
  }
  const on = gpus.map(g => (g.mig ? `GPU${g.index} MIG ${g.mig - 1}` : `GPU${g.index}`)).join(', ');
  const free = gpus.map(g => formatBytes(g.free_bytes)).join(', ');
  return `on ${on}, chosen by --gpus ${p.asked} (${free} free then${p.enough ? '' : ', less than asked'})`;
}

/** "Restart", "Shut Down", or the event as the supervisor names it. */
function eventName(e: string): string {
  switch (e) {
    case 'restart':
      return 'Restart';
    case 'shutdown':
      return 'Shut Down';
    case 'kernel died':
      return 'the kernel died';
    case 'over its GPU memory limit':
      return 'the kernel went over its GPU memory limit';
    default:
      return `the kernel stopped (${e})`;
  }
}

/**
 * The notification after a release: its text and whether it is a
 * warning. Null when the tree held no GPU memory (nothing to say).
 */
export function releaseMessage(r: IRelease): { text: string; warning: boolean } | null {
  const devs = (l: { index: number; bytes: number }[]) =>
    l.map(d => `GPU${d.index} ${formatBytes(d.bytes)}`).join(', ');
  if (r.error) {
    return { text: `${eventName(r.event)}: GPU release could not be confirmed: ${r.error}`, warning: true };
  }
  if (r.held.length > 0) {
    const pids = Array.from(new Set(r.held.flatMap(h => h.pids))).sort((a, b) => a - b);
    return {
      text: `${eventName(r.event)}: GPU memory still held ${(r.took_ms / 1000).toFixed(1)} s after the kernel's tree was killed: ` +
        `${devs(r.held)} (pid ${pids.join(', ')}). Check with tfgpu-kernel ps or nvidia-smi.`,
      warning: true
    };
  }
  if (r.released.length === 0) {
    return null;
  }
  return { text: `GPU memory released after ${eventName(r.event)}: ${devs(r.released)} (NVML confirmed)`, warning: false };
}
