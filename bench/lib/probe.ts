/**
 * What every bench prints beside its figures (issue 18 item 5): the machine's load, so that
 * figures taken on a shared machine are never read as quiet ones, and, for the process under
 * test, its event-loop delay and garbage-collection pauses over one scenario.
 */
import { readFileSync, readdirSync } from 'node:fs';
import { loadavg } from 'node:os';
import {
  PerformanceObserver,
  constants,
  monitorEventLoopDelay,
  performance,
  type EventLoopUtilization,
  type IntervalHistogram,
} from 'node:perf_hooks';
import { getHeapSpaceStatistics } from 'node:v8';

/** `load 1.02 0.88 0.70, runnable 3/415`: load averages and the runnable tasks right now (/proc/loadavg). */
export function machineLoad(): string {
  const [one, five, fifteen] = loadavg().map((x) => x.toFixed(2));
  let runnable = '?';
  try {
    runnable = readFileSync('/proc/loadavg', 'utf8').split(' ')[3] ?? '?';
  } catch {
    // not Linux: the averages alone
  }
  return `load ${one} ${five} ${fifteen}, runnable ${runnable}`;
}

/** Prints the machine's load with a label (bench start and end). */
export function sayLoad(label: string): void {
  process.stdout.write(
    `machine at ${label}: ${machineLoad()} (2 cores shared; compare figures only within one run)\n`,
  );
}

/** Run a bench's measurement between the machine's load at its start and at its end. */
export async function showingLoad(measure: () => Promise<void>): Promise<void> {
  sayLoad('start');
  try {
    await measure();
  } finally {
    sayLoad('end');
  }
}

export interface LoopSummary {
  delayP50Ms: number;
  delayP99Ms: number;
  delayMaxMs: number;
  gcCount: number;
  gcTotalMs: number;
  gcMaxMs: number;
  /** Full (mark-compact) GCs of the main thread's heap over the scenario. */
  majorGcs: number;
  /**
   * How much the main thread's old generation grew over the scenario (bytes): what was promoted or
   * allocated old, when no major GC fell in it; the rate that brings major GCs on (issue 18 item 1).
   */
  oldGrowthBytes: number;
  /** CPU time of the whole process (every thread) over the scenario, in ms. */
  cpuMs: number;
  /** Share of the wall time the main thread's event loop was busy (0–1). */
  loopUtilization: number;
  /** Share of every core's time the whole machine was busy (0–1; /proc/stat), or undefined off Linux. */
  machineBusy: number | undefined;
}

/** Busy and total jiffies of all cores so far (/proc/stat), or undefined off Linux. */
function machineTicks(): { busy: number; total: number } | undefined {
  try {
    const cpu =
      readFileSync('/proc/stat', 'utf8').split('\n', 1)[0]?.trim().split(/\s+/).slice(1).map(Number) ?? [];
    const total = cpu.reduce((a, b) => a + b, 0);
    const idle = (cpu[3] ?? 0) + (cpu[4] ?? 0);
    return { busy: total - idle, total };
  } catch {
    return undefined;
  }
}

export const formatLoop = (s: LoopSummary): string =>
  `loop delay p50 ${s.delayP50Ms.toFixed(2)} p99 ${s.delayP99Ms.toFixed(2)} max ${s.delayMaxMs.toFixed(1)} ms; gc ${s.gcCount}x ${s.gcTotalMs.toFixed(1)} ms total, max ${s.gcMaxMs.toFixed(2)} ms; ` +
  `main loop busy ${(s.loopUtilization * 100).toFixed(0)} %, process CPU ${s.cpuMs.toFixed(0)} ms` +
  (s.machineBusy === undefined
    ? ''
    : `; machine (all cores, every process) busy ${(s.machineBusy * 100).toFixed(0)} %`);

/** Bytes used now in the main thread's old generation (old, code and large-object spaces). */
function oldGenerationBytes(): number {
  let n = 0;
  for (const space of getHeapSpaceStatistics())
    if (['old_space', 'code_space', 'large_object_space'].includes(space.space_name))
      n += space.space_used_size;
  return n;
}

/** The old generation's growth per request, or why it cannot be read (a major GC freed some of it). */
export const oldGrowthPerRequest = (s: LoopSummary, requests: number): string =>
  s.majorGcs > 0
    ? `old generation: ${s.majorGcs} major GC${s.majorGcs > 1 ? 's' : ''} in the scenario`
    : `old generation +${(s.oldGrowthBytes / Math.max(1, requests)).toFixed(0)} B/request`;

/** CPU per request: the process's CPU over a scenario divided by the requests it served. */
export const cpuPerRequest = (s: LoopSummary, requests: number): string =>
  `${((s.cpuMs * 1000) / Math.max(1, requests)).toFixed(0)} µs CPU/request (all threads)`;

/**
 * Event-loop delay (10 ms resolution sampling is too coarse for a 5 ms target: 1 ms) and GC
 * pauses of this process between start() and stop().
 */
export class LoopProbe {
  private readonly histogram: IntervalHistogram = monitorEventLoopDelay({ resolution: 1 });
  private gcCount = 0;
  private gcTotal = 0;
  private gcMax = 0;
  private majors = 0;
  private oldStart = 0;
  private cpu: NodeJS.CpuUsage = process.cpuUsage();
  private elu: EventLoopUtilization = performance.eventLoopUtilization();
  private ticks = machineTicks();
  private readonly observer = new PerformanceObserver((list) => this.count(list.getEntries()));

  private count(entries: { duration: number; detail?: unknown }[]): void {
    for (const e of entries) {
      if ((e.detail as { kind?: number } | undefined)?.kind === constants.NODE_PERFORMANCE_GC_MAJOR)
        this.majors++;
      this.gcCount++;
      this.gcTotal += e.duration;
      this.gcMax = Math.max(this.gcMax, e.duration);
    }
  }

  start(): void {
    this.histogram.reset();
    this.histogram.enable();
    this.gcCount = 0;
    this.gcTotal = 0;
    this.gcMax = 0;
    this.majors = 0;
    this.oldStart = oldGenerationBytes();
    this.cpu = process.cpuUsage();
    this.elu = performance.eventLoopUtilization();
    this.ticks = machineTicks();
    this.observer.observe({ entryTypes: ['gc'] });
  }

  stop(): LoopSummary {
    this.histogram.disable();
    const cpu = process.cpuUsage(this.cpu);
    const elu = performance.eventLoopUtilization(this.elu);
    const ticks = machineTicks();
    const machineBusy =
      ticks && this.ticks && ticks.total > this.ticks.total
        ? (ticks.busy - this.ticks.busy) / (ticks.total - this.ticks.total)
        : undefined;
    this.count(this.observer.takeRecords());
    this.observer.disconnect();
    const oldGrowthBytes = oldGenerationBytes() - this.oldStart;
    const ms = (ns: number) => ns / 1e6;
    return {
      delayP50Ms: ms(this.histogram.percentile(50)),
      delayP99Ms: ms(this.histogram.percentile(99)),
      delayMaxMs: ms(this.histogram.max),
      gcCount: this.gcCount,
      gcTotalMs: this.gcTotal,
      gcMaxMs: this.gcMax,
      majorGcs: this.majors,
      oldGrowthBytes,
      cpuMs: (cpu.user + cpu.system) / 1000,
      loopUtilization: elu.utilization,
      machineBusy,
    };
  }
}

/** utime + stime (ms) of every process whose pid is in `roots` or descends from one (/proc), or 0 off Linux. */
export function treeCpuMs(roots: number[]): number {
  const stats: { pid: number; ppid: number; ms: number }[] = [];
  const tick = 10; // USER_HZ is 100 on Linux: one jiffy is 10 ms
  try {
    for (const name of readdirSync('/proc')) {
      if (!/^\d+$/.test(name)) continue;
      try {
        const raw = readFileSync(`/proc/${name}/stat`, 'utf8');
        const f = raw.slice(raw.lastIndexOf(')') + 2).split(' ');
        stats.push({ pid: Number(name), ppid: Number(f[1]), ms: (Number(f[11]) + Number(f[12])) * tick });
      } catch {
        // the process ended meanwhile
      }
    }
  } catch {
    return 0;
  }
  const inTree = new Set(roots);
  for (let grew = true; grew; ) {
    grew = false;
    for (const s of stats)
      if (!inTree.has(s.pid) && inTree.has(s.ppid)) {
        inTree.add(s.pid);
        grew = true;
      }
  }
  return stats.filter((s) => inTree.has(s.pid)).reduce((a, s) => a + s.ms, 0);
}
