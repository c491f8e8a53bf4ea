// server.mjs - the server: GET /health (version, store, boxes by state, warm
// pool, code runner concurrency) and GET /metrics sampled every few seconds
// while the page is open, drawn as small charts (chart.mjs).
import {get, request} from './api.mjs';
import {errText} from './app.mjs';
import {fill, h} from './dom.mjs';
import {lineChart} from './chart.mjs';

const EVERY_MS = 2000;
const KEEP = 60;

export function parseMetrics(text) {
  const out = [];
  for (const line of text.split('\n')) {
    if (!line || line.startsWith('#')) continue;
    const m = /^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{([^}]*)\})?\s+(\S+)/.exec(line);
    if (!m) continue;
    const labels = {};
    if (m[3]) for (const lm of m[3].matchAll(/([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"/g)) labels[lm[1]] = lm[2];
    out.push({name: m[1], labels, value: Number(m[4])});
  }
  return out;
}

function sum(ms, name, pred) {
  return ms.filter(m => m.name === name && (!pred || pred(m.labels))).reduce((a, m) => a + m.value, 0);
}

export async function render(main, args, signal) {
  const health = h('dl', {class: 'info', id: 'health'});
  const charts = h('div', {class: 'charts', id: 'charts'});
  const err = h('p', {class: 'error', role: 'alert'});
  main.append(h('h1', {}, 'Server'), h('section', {'aria-labelledby': 'h-title'}, h('h2', {id: 'h-title'}, 'Health'), health),
    h('section', {'aria-labelledby': 'm-title'}, h('h2', {id: 'm-title'}, 'Metrics (last two minutes)'), err, charts));

  const hist = {running: [], paused: [], stopped: [], execRate: [], httpRate: [], errRate: [], inflight: [], pool: [], sse: []};
  let prev = null;
  const push = (k, v) => { hist[k].push(v); if (hist[k].length > KEEP) hist[k].shift(); };

  async function tick() {
    try {
      const hj = await get('/health', {signal});
      const rows = [['Status', hj.status], ['Version', hj.version], ['Uptime', Math.round(hj.uptime_s) + ' s'],
        ['Store', hj.store], ['Boxes', Object.entries(hj.boxes || {}).map(([k, v]) => k + ' ' + v).join(', ')],
        ['Warm pool', (hj.pool ? hj.pool.size + ' of ' + hj.pool.target : '–')],
        ['Execs in flight', String(hj.execs_in_flight ?? '–')]];
      if (hj.concurrency) rows.push(['Code runner', Object.entries(hj.concurrency).map(([k, v]) => k + ' ' + (typeof v === 'object' ? JSON.stringify(v) : v)).join(', ')]);
      fill(health, rows.map(([k, v]) => [h('dt', {}, k), h('dd', {}, v)]));
      const text = await (await request('GET', '/metrics', {signal})).text();
      const ms = parseMetrics(text);
      const now = performance.now();
      const cur = {execs: sum(ms, 'agentbox_execs_total'), http: sum(ms, 'agentbox_http_requests_total'),
                   errs: sum(ms, 'agentbox_errors_total'), t: now};
      for (const st of ['running', 'paused', 'stopped']) push(st, sum(ms, 'agentbox_boxes', l => l.state === st));
      push('inflight', sum(ms, 'agentbox_execs_in_flight'));
      push('pool', sum(ms, 'agentbox_pool_size'));
      push('sse', sum(ms, 'agentbox_sse_subscribers'));
      if (prev) {
        const dt = (cur.t - prev.t) / 1000;
        push('execRate', Math.max(0, (cur.execs - prev.execs) / dt));
        push('httpRate', Math.max(0, (cur.http - prev.http) / dt));
        push('errRate', Math.max(0, (cur.errs - prev.errs) / dt));
      }
      prev = cur;
      fill(err);
      fill(charts,
        figure('Boxes', lineChart('Boxes', [{label: 'running', values: hist.running, cls: 'c0'},
          {label: 'paused', values: hist.paused, cls: 'c1'}, {label: 'stopped', values: hist.stopped, cls: 'c2'}])),
        figure('Execs per second', lineChart('Execs per second', [{label: 'execs', values: hist.execRate, cls: 'c0'},
          {label: 'in flight', values: hist.inflight, cls: 'c1'}], '')),
        figure('HTTP requests per second', lineChart('HTTP requests per second', [{label: 'requests', values: hist.httpRate, cls: 'c0'},
          {label: 'errors', values: hist.errRate, cls: 'c2'}])),
        figure('Warm pool and event streams', lineChart('Warm pool and event streams', [{label: 'pool', values: hist.pool, cls: 'c0'},
          {label: 'SSE', values: hist.sse, cls: 'c1'}])));
    } catch (e) {
      if (!signal.aborted) fill(err, errText(e));
    }
  }
  function figure(caption, chart) { return h('figure', {}, chart, h('figcaption', {}, caption)); }
  await tick();
  const timer = setInterval(tick, EVERY_MS);
  signal.addEventListener('abort', () => clearInterval(timer));
}
