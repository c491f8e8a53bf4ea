// box.mjs - one box: its state and actions (stop, start, pause, resume,
// delete), limits and usage, a terminal, its files, its exec history (the
// audit table: GET /v1/sandboxes/{id}/execs), its events live, and its
// network policy.
import {api, streamEvents} from './api.mjs';
import {errText} from './app.mjs';
import {meter} from './boxes.mjs';
import {badge, field, fill, fmtAgo, fmtBytes, fmtTime, h, toast} from './dom.mjs';
import {filesPanel} from './files.mjs';
import {terminalPanel} from './terminal.mjs';

const MAX_EVENTS = 200;

export async function render(main, args, signal) {
  const id = args[0];
  if (!id) { location.hash = '#/boxes'; return; }
  const base = '/v1/sandboxes/' + encodeURIComponent(id);
  let box = await api('GET', base, {signal});

  const state = h('span', {id: 'box-state'});
  const info = h('dl', {class: 'info'});
  const actions = h('div', {class: 'actions', role: 'group', 'aria-label': 'Box actions'});
  const acts = [
    ['stop', 'Stop', b => b.status === 'running' || b.status === 'paused'],
    ['start', 'Start', b => b.status === 'stopped' || b.status === 'error'],
    ['pause', 'Pause', b => b.status === 'running'],
    ['resume', 'Resume', b => b.status === 'paused'],
  ];
  const buttons = acts.map(([op, label]) => h('button', {type: 'button', 'data-op': op, on: {click: () => act(op)}}, label));
  const del = h('button', {type: 'button', class: 'danger', on: {click: remove}}, 'Delete');
  actions.append(...buttons, del);

  async function act(op) {
    try {
      box = await api('POST', base + '/' + op, {json: {}, signal});
      toast(id + ': ' + box.status);
      draw();
    } catch (e) { toast(errText(e), true); }
  }
  async function remove() {
    if (!confirm('Delete box ' + id + ' and all its files?')) return;
    try {
      await api('DELETE', base, {signal});
      toast('Deleting ' + id);
      location.hash = '#/boxes';
    } catch (e) { toast(errText(e), true); }
  }
  function draw() {
    fill(state, badge(box.status));
    acts.forEach(([, , ok], i) => { buttons[i].disabled = !ok(box); });
    del.disabled = box.status === 'deleting';
    const l = box.limits || {};
    const s = box.stats;
    const rows = [
      ['App / user / chat', [box.app_id, box.user_id, box.chat_id].map(x => x ?? '–').join(' / ')],
      ['Mode', box.mode],
      ['Created', fmtTime(box.created_at)],
      ['Last active', fmtAgo(box.last_active_at)],
      ['Limits', l.cpus !== undefined ? `${l.cpus} cpu, ${l.memory_mib} MiB memory, ${l.disk_mib} MiB disk, ${l.pids} pids, ${l.timeout_s} s per command` : 'server defaults'],
      ['Idle pause / stop', `${box.idle_pause_s} s / ${box.idle_stop_s} s`],
      ['Memory', s ? meter(s.memory_bytes, s.memory_limit) : '–'],
      ['Disk', s ? meter(s.disk_used_bytes, s.disk_limit_bytes) : '–'],
      ['Processes', s ? String(s.pids) : '–'],
      ['CPU time', s ? (s.cpu_usage_ns / 1e9).toFixed(2) + ' s' : '–'],
    ];
    if (box.error) rows.push(['Error', box.error]);
    fill(info, rows.map(([k, v]) => [h('dt', {}, k), h('dd', {}, v)]));
  }
  async function reload() {
    try {
      box = await api('GET', base, {signal});
      draw();
    } catch (e) {
      if (e.status === 404) { fill(state, badge('gone')); buttons.forEach(b => { b.disabled = true; }); }
    }
  }

  const execBody = h('tbody');
  const execs = h('section', {'aria-labelledby': 'execs-title'},
    h('h2', {id: 'execs-title'}, 'Exec history'),
    h('table', {class: 'list', id: 'execs'},
      h('thead', h('tr', ['When', 'Command', 'Exit', 'Time', 'Output'].map(t => h('th', {scope: 'col'}, t)))),
      execBody));
  async function loadExecs() {
    try {
      const j = await api('GET', base + '/execs?limit=50', {signal});
      fill(execBody, j.execs.length ? j.execs.map(x => h('tr', {},
        h('td', {}, fmtTime(x.started_at)),
        h('td', {}, h('code', {}, x.command)),
        h('td', {class: 'num ' + (x.exit_code === 0 ? 'ok' : 'bad')}, x.timed_out ? 'timeout' : String(x.exit_code)),
        h('td', {class: 'num'}, x.duration_ms + ' ms'),
        h('td', {class: 'num'}, fmtBytes(x.stdout_bytes) + ' / ' + fmtBytes(x.stderr_bytes)))) :
        h('tr', h('td', {colspan: 5, class: 'muted'}, 'No execs yet.')));
    } catch (e) {
      fill(execBody, h('tr', h('td', {colspan: 5, class: 'error'}, errText(e))));
    }
  }

  const evList = h('ol', {class: 'events', id: 'events', reversed: true});
  const evState = h('span', {class: 'live'}, 'connecting…');
  const events = h('section', {'aria-labelledby': 'events-title'},
    h('div', {class: 'head'}, h('h2', {id: 'events-title'}, 'Events'), evState), evList);

  const net = networkPanel(base, signal, () => box, b => { box = b; draw(); });

  main.append(
    h('div', {class: 'head'}, h('h1', {}, 'Box ', h('code', {}, id)), state),
    actions, info,
    terminalPanel(id, signal),
    filesPanel(id, signal),
    execs, events, net.el);
  draw();
  net.draw();
  loadExecs();
  const timer = setInterval(reload, 5000);
  signal.addEventListener('abort', () => clearInterval(timer));
  streamEvents('/v1/events?box_id=' + encodeURIComponent(id), ev => {
    const j = ev.json || {};
    const data = j.data ? JSON.stringify(j.data) : '';
    evList.prepend(h('li', {}, h('time', {}, fmtTime(j.time)), ' ', h('strong', {}, ev.type), ' ', h('code', {}, data)));
    while (evList.children.length > MAX_EVENTS) evList.lastChild.remove();
    if (ev.type === 'exec') loadExecs();
    if (ev.type.startsWith('box.')) reload();
  }, signal, (st, msg) => fill(evState, st === 'open' ? 'live' : 'reconnecting' + (msg ? ': ' + msg : '')));
}

function networkPanel(base, signal, getBox, setBox) {
  const mode = h('select', {name: 'mode'}, ['none', 'allowlist', 'full'].map(m => h('option', {value: m}, m)));
  const allow = h('textarea', {name: 'allow', rows: 3, spellcheck: 'false'});
  const deny = h('textarea', {name: 'deny', rows: 3, spellcheck: 'false'});
  const form = h('form', {class: 'network'},
    h('div', {class: 'row'}, field('Mode', mode),
      field('Allow (one rule a line)', allow, 'example.com, *.example.com, 203.0.113.5:443'),
      field('Deny (one rule a line)', deny)),
    h('button', {type: 'submit'}, 'Save network policy'));
  const lines = t => t.split('\n').map(x => x.trim()).filter(Boolean);
  form.addEventListener('submit', async ev => {
    ev.preventDefault();
    try {
      const b = await api('PUT', base + '/network', {json: {mode: mode.value, allow: lines(allow.value), deny: lines(deny.value)}, signal});
      setBox(b);
      toast('Network policy saved: ' + b.network.mode);
    } catch (e) { toast(errText(e), true); }
  });
  const el = h('section', {'aria-labelledby': 'net-title'}, h('h2', {id: 'net-title'}, 'Network'), form);
  return {
    el,
    draw() {
      const n = getBox().network || {mode: 'none', allow: [], deny: []};
      mode.value = n.mode === 'restricted' ? 'allowlist' : n.mode;
      allow.value = (n.allow || []).join('\n');
      deny.value = (n.deny || []).join('\n');
    },
  };
}
