import type { BenchResults } from "./results.js";
import { find } from "./targets.js";
import { RUNTIMES } from "../src/runtimes/names.js";

const COLORS = [
  "#444",
  "#888",
  "#1f77b4",
  "#d62728",
  "#ff9896",
  "#2ca02c",
  "#98df8a",
  "#9467bd",
  "#c5b0d5",
];

const esc = (s: string) => s.replace(/&/g, "&amp;").replace(/</g, "&lt;").replace(/>/g, "&gt;");

/**
 * Warm `print(1)` latency by runtime and system as a horizontal bar chart on a log scale (bars:
 * p50, whiskers: p90), self-contained SVG with no library.
 */
export function renderSvg(r: BenchResults): string {
  const systems = r.systems;
  const rows: { runtime: string; sys: number; p50: number; p90: number }[] = [];
  for (const rt of RUNTIMES)
    systems.forEach((s, i) => {
      const sum = find(r.latency, s.id, rt, "print")?.result?.summary;
      if (sum) rows.push({ runtime: rt, sys: i, p50: sum.p50, p90: sum.p90 });
    });
  const barH = 12;
  const left = 110;
  const width = 760;
  const plotW = width - left - 200;
  const max = Math.max(10_000, ...rows.map((x) => x.p90));
  const lo = 10;
  const xOf = (ms: number) =>
    left + (plotW * Math.log10(Math.max(lo, ms) / lo)) / Math.log10(max / lo);
  const out: string[] = [];
  let y = 40;
  for (const rt of RUNTIMES) {
    const mine = rows.filter((x) => x.runtime === rt);
    if (mine.length === 0) continue;
    out.push(
      `<text x="8" y="${y + (mine.length * (barH + 2)) / 2 + 4}" font-weight="bold">${rt}</text>`,
    );
    for (const b of mine) {
      const c = COLORS[b.sys % COLORS.length] ?? "#000";
      out.push(
        `<rect x="${left}" y="${y}" width="${(xOf(b.p50) - left).toFixed(1)}" height="${barH}" fill="${c}"><title>${esc(systems[b.sys]?.label ?? "")}: p50 ${b.p50} ms, p90 ${b.p90} ms</title></rect>`,
        `<line x1="${xOf(b.p50).toFixed(1)}" x2="${xOf(b.p90).toFixed(1)}" y1="${y + barH / 2}" y2="${y + barH / 2}" stroke="#000"/>`,
        `<text x="${(xOf(b.p90) + 4).toFixed(1)}" y="${y + barH - 2}" font-size="10">${Math.round(b.p50)}</text>`,
      );
      y += barH + 2;
    }
    y += 10;
  }
  const ticks: string[] = [];
  for (let t = lo; t <= max; t *= 10)
    ticks.push(
      `<line x1="${xOf(t).toFixed(1)}" x2="${xOf(t).toFixed(1)}" y1="30" y2="${y}" stroke="#ddd"/><text x="${xOf(t).toFixed(1)}" y="${y + 14}" font-size="10" text-anchor="middle">${t >= 1000 ? `${t / 1000} s` : `${t} ms`}</text>`,
    );
  const legend = systems.map(
    (s, i) =>
      `<rect x="${left + plotW + 40}" y="${40 + i * 16}" width="10" height="10" fill="${COLORS[i % COLORS.length]}"/><text x="${left + plotW + 55}" y="${49 + i * 16}" font-size="10">${esc(s.label)}</text>`,
  );
  const height = Math.max(y + 30, 60 + systems.length * 16);
  return [
    `<svg xmlns="http://www.w3.org/2000/svg" width="${width}" height="${height}" font-family="sans-serif" font-size="11">`,
    `<rect width="100%" height="100%" fill="#fff"/>`,
    `<text x="8" y="18" font-size="13">Warm print(1) latency, p50 bar, p90 whisker, log scale — ${esc(r.host.hostname)}, ${r.host.cpus} cores, ${r.host.microvmIsolation ?? (r.host.kvm ? "KVM" : "TCG")}, ${r.date.slice(0, 10)} (${r.mode})</text>`,
    ...ticks,
    ...out,
    ...legend,
    "</svg>",
    "",
  ].join("\n");
}
