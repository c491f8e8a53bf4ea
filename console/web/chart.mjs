// chart.mjs - a small line chart drawn as inline SVG (no library): the last
// N samples of one or more series, with the latest value as text.
const NS = 'http://www.w3.org/2000/svg';
const W = 300, H = 80;

function svg(tag, attrs) {
  const el = document.createElementNS(NS, tag);
  for (const [k, v] of Object.entries(attrs)) el.setAttribute(k, String(v));
  return el;
}

// series: [{label, values: [numbers], cls}]; returns an <svg> element.
export function lineChart(title, series, unit) {
  const all = series.flatMap(s => s.values).filter(Number.isFinite);
  const max = Math.max(1, ...all);
  const root = svg('svg', {viewBox: `0 0 ${W} ${H + 18}`, class: 'chart', role: 'img'});
  const t = svg('title', {});
  const last = series.map(s => s.label + ' ' + fmt(s.values[s.values.length - 1]) + (unit || '')).join(', ');
  t.textContent = title + ': ' + last;
  root.append(t);
  root.append(svg('line', {x1: 0, y1: H, x2: W, y2: H, class: 'axis'}));
  const top = svg('text', {x: 2, y: 10, class: 'tick'});
  top.textContent = fmt(max) + (unit || '');
  root.append(top);
  for (const s of series) {
    const n = s.values.length;
    if (n < 1) continue;
    const pts = s.values.map((v, i) => {
      const x = n === 1 ? W : (i / (n - 1)) * W;
      const y = H - (Number.isFinite(v) ? v : 0) / max * (H - 12);
      return x.toFixed(1) + ',' + y.toFixed(1);
    });
    root.append(svg('polyline', {points: pts.join(' '), class: 'line ' + (s.cls || 'c0'), fill: 'none'}));
  }
  let x = 2;
  series.forEach(s => {
    const l = svg('text', {x, y: H + 14, class: 'legend ' + (s.cls || 'c0')});
    l.textContent = s.label + ': ' + fmt(s.values[s.values.length - 1]) + (unit || '');
    root.append(l);
    x += 100;
  });
  return root;
}

function fmt(v) {
  if (!Number.isFinite(v)) return '–';
  if (Math.abs(v) >= 100) return v.toFixed(0);
  if (Math.abs(v) >= 10) return v.toFixed(1);
  return v.toFixed(2).replace(/\.?0+$/, '') || '0';
}
