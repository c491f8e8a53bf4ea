// boxes.mjs - the list of boxes: state, keys, limits and live CPU, memory and
// disk (GET /v1/sandboxes?stats=1, refreshed on lifecycle events and every
// few seconds), filters by app, user, chat and state, and a form to make one.
import {api, streamEvents} from './api.mjs';
import {errText} from './app.mjs';
import {badge, field, fill, fmtAgo, fmtBytes, h, toast} from './dom.mjs';

const REFRESH_MS = 4000;

export async function render(main, args, signal) {
  const f = {
    app_id: h('input', {type: 'search', name: 'app_id', placeholder: 'any'}),
    user_id: h('input', {type: 'search', name: 'user_id', placeholder: 'any'}),
    chat_id: h('input', {type: 'search', name: 'chat_id', placeholder: 'any'}),
    status: h('select', {name: 'status'},
      ['', 'running', 'paused', 'stopped', 'creating', 'deleting', 'error'].map(
        s => h('option', {value: s}, s || 'any'))),
  };
  const saved = JSON.parse(sessionStorage.getItem('agentbox.filters') || '{}');
  for (const [k, el] of Object.entries(f)) el.value = saved[k] || '';
  const filters = h('form', {class: 'filters', role: 'search', 'aria-label': 'Filter boxes'},
    field('App', f.app_id), field('User', f.user_id), field('Chat', f.chat_id),
    field('State', f.status));
  const live = h('span', {class: 'live', 'aria-live': 'off'}, 'connecting…');
  const tbody = h('tbody');
  const table = h('table', {class: 'list', id: 'boxes'},
    h('caption', {class: 'sr-only'}, 'Boxes'),
    h('thead', h('tr', ['Box', 'State', 'App / user / chat', 'Limits', 'CPU', 'Memory', 'Disk',
                        'Active'].map(t => h('th', {scope: 'col'}, t)))),
    tbody);
  const empty = h('p', {class: 'muted', hidden: true}, 'No boxes match.');

  const nf = {
    app_id: h('input', {name: 'app_id'}), user_id: h('input', {name: 'user_id'}),
    chat_id: h('input', {name: 'chat_id'}), id: h('input', {name: 'id', pattern: '[a-z0-9][a-z0-9_-]{0,62}'}),
  };
  const createForm = h('form', {class: 'create', 'aria-labelledby': 'new-title'},
    h('h2', {id: 'new-title'}, 'New box'),
    h('p', {class: 'muted'}, 'Give app, user and chat (the box id is derived from them), or an id, or nothing for a random id.'),
    h('div', {class: 'row'}, field('App', nf.app_id), field('User', nf.user_id), field('Chat', nf.chat_id),
      field('or id', nf.id)),
    h('button', {type: 'submit'}, 'Create box'));
  createForm.addEventListener('submit', async ev => {
    ev.preventDefault();
    const body = {};
    for (const [k, el] of Object.entries(nf)) if (el.value.trim()) body[k] = el.value.trim();
    try {
      const b = await api('POST', '/v1/sandboxes', {json: body, signal});
      toast('Box ' + b.id + ' is ' + b.status);
      location.hash = '#/box/' + encodeURIComponent(b.id);
    } catch (e) {
      toast(errText(e), true);
    }
  });

  main.append(h('div', {class: 'head'}, h('h1', {}, 'Boxes'), live), filters, table, empty, createForm);

  const prev = new Map(); // id -> {cpu_ns, at}
  const cpuPct = new Map();
  let timer = null, busy = false, again = false;
  async function refresh() {
    if (busy) { again = true; return; }
    busy = true;
    try {
      const q = new URLSearchParams({stats: '1'});
      const keep = {};
      for (const [k, el] of Object.entries(f)) if (el.value.trim()) { q.set(k, el.value.trim()); keep[k] = el.value.trim(); }
      sessionStorage.setItem('agentbox.filters', JSON.stringify(keep));
      const j = await api('GET', '/v1/sandboxes?' + q.toString(), {signal});
      const now = performance.now();
      for (const b of j.sandboxes) {
        if (!b.stats) { prev.delete(b.id); cpuPct.delete(b.id); continue; }
        const p = prev.get(b.id);
        if (p && now > p.at) {
          const cpus = (b.limits && b.limits.cpus) || 1;
          cpuPct.set(b.id, Math.max(0, (b.stats.cpu_usage_ns - p.cpu_ns) / ((now - p.at) * 1e6) / cpus * 100));
        }
        prev.set(b.id, {cpu_ns: b.stats.cpu_usage_ns, at: now});
      }
      fill(tbody, j.sandboxes.map(row));
      empty.hidden = j.sandboxes.length > 0;
    } catch (e) {
      if (!signal.aborted) fill(tbody, h('tr', h('td', {colspan: 8, class: 'error'}, errText(e))));
    } finally {
      busy = false;
      if (again && !signal.aborted) { again = false; refresh(); }
    }
  }
  function row(b) {
    const l = b.limits || {};
    const s = b.stats;
    const deerflow = b.metadata && b.metadata['deerflow.sandbox_id'];
    const keys = ([b.app_id, b.user_id, b.chat_id].filter(x => x !== null).join(' / ') ||
                  (b.thread_id && !deerflow ? 'thread ' + b.thread_id : '–')) +
                 (deerflow ? ' · DeerFlow sandbox ' + deerflow : '');
    return h('tr', {'data-id': b.id},
      h('td', {}, h('a', {href: '#/box/' + encodeURIComponent(b.id)}, b.id)),
      h('td', {}, badge(b.status)),
      h('td', {class: 'keys'}, keys),
      h('td', {}, l.cpus !== undefined ? `${l.cpus} cpu · ${l.memory_mib} MiB · ${l.disk_mib} MiB disk` : 'defaults'),
      h('td', {class: 'num'}, s && cpuPct.has(b.id) ? cpuPct.get(b.id).toFixed(1) + ' %' : '–'),
      h('td', {class: 'num'}, s ? meter(s.memory_bytes, s.memory_limit) : '–'),
      h('td', {class: 'num'}, s ? meter(s.disk_used_bytes, s.disk_limit_bytes) : '–'),
      h('td', {}, fmtAgo(b.last_active_at)));
  }
  filters.addEventListener('input', () => refresh());
  filters.addEventListener('submit', ev => { ev.preventDefault(); refresh(); });
  await refresh();
  timer = setInterval(refresh, REFRESH_MS);
  signal.addEventListener('abort', () => clearInterval(timer));
  streamEvents('/v1/events', ev => {
    if (ev.type.startsWith('box.')) refresh();
  }, signal, (st, msg) => fill(live, st === 'open' ? 'live' : 'reconnecting' + (msg ? ': ' + msg : '')));
}

export function meter(used, limit) {
  const pct = limit ? Math.min(100, used / limit * 100) : 0;
  return h('span', {class: 'meter'},
    h('meter', {min: 0, max: 100, value: pct.toFixed(0), 'aria-label': pct.toFixed(0) + ' percent'}),
    ' ' + fmtBytes(used) + (limit ? ' / ' + fmtBytes(limit) : ''));
}
