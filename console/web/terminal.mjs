// terminal.mjs - a terminal in the box through xterm.js (vendored from npm
// into the binary) and the terminal API (docs/api.md "Terminals"): POST
// .../terminals makes one, a WebSocket at .../terminals/{tid} carries it.
// Browsers cannot set Authorization on a WebSocket: the token goes as the
// subprotocol "bearer.TOKEN" next to "agentbox.terminal.v1", never in the URL.
import {api, getToken} from './api.mjs';
import {errText} from './app.mjs';
import {fill, h} from './dom.mjs';
import {installStyleShim} from './cspshim.mjs';

let xtermLoad = null;
async function loadXterm() {
  if (!xtermLoad) {
    xtermLoad = (async () => {
      const css = h('link', {rel: 'stylesheet', href: '/console/xterm.css'});
      document.head.append(css);
      installStyleShim();
      const [x, f] = await Promise.all([import('./xterm.mjs'), import('./addon-fit.mjs')]);
      return {Terminal: x.Terminal, FitAddon: f.FitAddon};
    })();
    xtermLoad.catch(() => { xtermLoad = null; });
  }
  return xtermLoad;
}

export function terminalPanel(boxId, signal) {
  const base = '/v1/sandboxes/' + encodeURIComponent(boxId) + '/terminals';
  const status = h('p', {class: 'muted', id: 'term-status', role: 'status'});
  const screen = h('div', {class: 'term', id: 'term'});
  const list = h('ul', {class: 'terms'});
  const newBtn = h('button', {type: 'button', id: 'term-new', on: {click: () => open(null)}}, 'New terminal');
  const section = h('section', {'aria-labelledby': 'term-title'},
    h('div', {class: 'head'}, h('h2', {id: 'term-title'}, 'Terminal'), newBtn), list, status, screen);

  let term = null, fit = null, ws = null, current = null;
  const enc = new TextEncoder();

  function close() {
    if (ws) { ws.onclose = null; ws.close(1000); ws = null; }
    if (term) { term.dispose(); term = null; }
  }
  signal.addEventListener('abort', close);

  async function refreshList() {
    try {
      const j = await api('GET', base, {signal});
      fill(list, j.terminals.map(t => h('li', {},
        h('button', {type: 'button', class: 'link', on: {click: () => open(t)}},
          (t.id === current ? '▶ ' : '') + t.id + ' — ' + (t.argv || []).join(' ') +
          (t.running ? '' : ' (exited ' + t.exit_code + ')')))));
    } catch (e) {
      if ((e.status === 404 && e.message.startsWith('no route')) || e.status === 405) {
        fill(status, 'This server has no terminal API (GET ' + base + ' answered ' + e.status + ').');
        newBtn.disabled = true;
      }
    }
  }

  async function open(t) {
    close();
    let X;
    try {
      X = await loadXterm();
    } catch (e) {
      fill(status, 'xterm.js was not built into this server: run scripts/npm-deps.sh, then rebuild (' + e.message + ').');
      return;
    }
    term = new X.Terminal({cursorBlink: true, convertEol: false, fontSize: 14, scrollback: 5000,
                           fontFamily: 'DejaVu Sans Mono, monospace'});
    fit = new X.FitAddon();
    term.loadAddon(fit);
    term.open(screen);
    fit.fit();
    try {
      if (!t) t = await api('POST', base, {json: {cols: term.cols, rows: term.rows}, signal});
    } catch (e) {
      fill(status, 'Cannot open a terminal: ' + errText(e));
      return;
    }
    current = t.id;
    connect(t);
    refreshList();
  }

  function connect(t) {
    const url = (location.protocol === 'https:' ? 'wss://' : 'ws://') + location.host + base + '/' + encodeURIComponent(t.id);
    const protos = ['agentbox.terminal.v1'];
    const tok = getToken();
    if (tok) protos.push('bearer.' + tok);
    try {
      ws = new WebSocket(url, protos);
    } catch (e) {
      // A subprotocol is an HTTP token: a token with other characters cannot be one.
      fill(status, 'Cannot open the WebSocket: ' + e.message + ' (the token must be made of URL-safe characters).');
      return;
    }
    ws.binaryType = 'arraybuffer';
    fill(status, 'Connecting to ' + t.id + '…');
    ws.onopen = () => {
      fill(status, 'Connected to terminal ' + t.id + ' (' + (t.argv || []).join(' ') + ')');
      ws.send(JSON.stringify({type: 'resize', cols: term.cols, rows: term.rows}));
      term.focus();
    };
    ws.onmessage = ev => {
      if (!term) return;
      if (typeof ev.data === 'string') {
        let m = null;
        try { m = JSON.parse(ev.data); } catch (_) { return; }
        if (m && m.type === 'exit') {
          term.write('\r\n[process exited with code ' + m.exit_code + ']\r\n');
          refreshList();
        }
        return;
      }
      term.write(new Uint8Array(ev.data));
    };
    ws.onclose = ev => {
      fill(status, 'Terminal ' + t.id + ' disconnected (' + ev.code + (ev.reason ? ' ' + ev.reason : '') + ').');
      ws = null;
    };
    term.onData(d => { if (ws && ws.readyState === 1) ws.send(enc.encode(d)); });
    term.onBinary(d => {
      if (!ws || ws.readyState !== 1) return;
      const b = new Uint8Array(d.length);
      for (let i = 0; i < d.length; i++) b[i] = d.charCodeAt(i) & 255;
      ws.send(b);
    });
    term.onResize(({cols, rows}) => {
      if (ws && ws.readyState === 1) ws.send(JSON.stringify({type: 'resize', cols, rows}));
    });
  }

  const onResize = () => { if (fit && term) fit.fit(); };
  window.addEventListener('resize', onResize);
  signal.addEventListener('abort', () => window.removeEventListener('resize', onResize));
  refreshList();
  return section;
}
