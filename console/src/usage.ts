// The live usage chart (uPlot): CPU % and memory MiB over time.
import uPlot from "uplot";
import "uplot/dist/uPlot.min.css";
import { h } from "./dom";

export function usageChart() {
  const el = h("div", { class: "chart", role: "img", "aria-label": "CPU percent and memory over the last minutes" });
  const data: [number[], number[], number[]] = [[], [], []];
  let plot: uPlot | null = null;
  requestAnimationFrame(() => {
    plot = new uPlot({
      width: Math.max(320, el.clientWidth || 600), height: 240,
      series: [{}, { label: "CPU %", stroke: "#2563eb", width: 2 }, { label: "Memory MiB", stroke: "#16a34a", width: 2, scale: "mib" }],
      axes: [{}, { label: "CPU %" }, { side: 1, scale: "mib", label: "MiB", grid: { show: false } }],
    }, data, el);
  });
  return {
    el,
    push(t: number, cpu: number, mib: number) {
      data[0].push(t); data[1].push(cpu); data[2].push(mib);
      if (data[0].length > 300) data.forEach((d) => d.shift());
      plot?.setData(data);
    },
    dispose() { plot?.destroy(); },
  };
}
