// app.mjs - the console's shell: login, navigation (#/page/arg), and the
// life cycle of pages (each gets an AbortSignal that ends its fetches,
// streams and timers when the user leaves it).
import {api, ApiError, clearToken, getToken, setToken} from './api.mjs';
import {field, fill, h, toast} from './dom.mjs';

const pages = {
  boxes: () => import('./boxes.mjs'),
  box: () => import('./box.mjs'),
  skills: () => import('./skills.mjs'),
  playground: () => import('./playground.mjs'),
  chat: () => import('./chat.mjs'),
  server: () => import('./server.mjs'),
};

const main = document.getElementById('main');
let current = null; // AbortController of the page shown

function route() {
  const parts = location.hash.replace(/^#\/?/, '').split('/').map(decodeURIComponent);
  const name = pages[parts[0]] ? parts[0] : 'boxes';
  return {name, args: parts.slice(1)};
}

async function show() {
  if (current) current.abort();
  document.getElementById('toast').className = '';
  current = new AbortController();
  const signal = current.signal;
  if (getToken() === null) {
    loginPage();
    return;
  }
  const {name, args} = route();
  for (const a of document.querySelectorAll('#nav a')) {
    if (a.dataset.page === name || (name === 'box' && a.dataset.page === 'boxes'))
      a.setAttribute('aria-current', 'page');
    else
      a.removeAttribute('aria-current');
  }
  document.getElementById('nav').hidden = false;
  document.getElementById('logout').hidden = false;
  let mod;
  try {
    mod = await pages[name]();
  } catch (e) {
    fill(main, h('p', {class: 'error'}, 'Cannot load this page: ' + e.message));
    return;
  }
  if (signal.aborted) return;
  fill(main);
  try {
    await mod.render(main, args, signal);
  } catch (e) {
    if (signal.aborted || e.name === 'AbortError') return;
    main.append(h('p', {class: 'error', role: 'alert'}, errText(e)));
  }
}

export function errText(e) {
  if (e instanceof ApiError) return e.message + ' (' + e.status + ' ' + e.code + ')';
  return String(e && e.message ? e.message : e);
}

async function whoAmI() {
  // The admin token may list API keys; an app-scoped key gets 403.
  try {
    await api('GET', '/v1/keys');
    return 'admin';
  } catch (e) {
    if (e.status === 403) return 'API key (one app)';
    throw e;
  }
}

function loginPage() {
  document.getElementById('nav').hidden = true;
  document.getElementById('logout').hidden = true;
  fill(document.getElementById('who'));
  const input = h('input', {type: 'password', name: 'token', autocomplete: 'current-password',
                            spellcheck: 'false'});
  const msg = h('p', {class: 'error', role: 'alert'});
  const form = h('form', {class: 'login', 'aria-labelledby': 'login-title'},
    h('h1', {id: 'login-title'}, 'Log in'),
    field('Admin token or API key', input,
          'Kept in this tab only (sessionStorage) and sent in the Authorization header. ' +
          'Leave empty for a server without a token (loopback only).'),
    h('button', {type: 'submit'}, 'Log in'), msg);
  form.addEventListener('submit', async ev => {
    ev.preventDefault();
    fill(msg);
    setToken(input.value.trim());
    try {
      await api('GET', '/v1/sandboxes?status=running');
      const who = await whoAmI();
      sessionStorage.setItem('agentbox.who', who);
      showWho();
      if (!location.hash || location.hash === '#/login') location.hash = '#/boxes';
      else show();
    } catch (e) {
      clearToken();
      fill(msg, e.status === 401 ? 'The server refused this token.' : errText(e));
    }
  });
  fill(main, form);
  input.focus();
}

function showWho() {
  const who = sessionStorage.getItem('agentbox.who');
  fill(document.getElementById('who'), who ? 'Logged in: ' + who : '');
}

document.getElementById('logout').addEventListener('click', () => {
  clearToken();
  sessionStorage.removeItem('agentbox.who');
  toast('Logged out');
  show();
});
window.addEventListener('agentbox-unauthorized', () => {
  if (getToken() !== null && sessionStorage.getItem('agentbox.who')) {
    clearToken();
    sessionStorage.removeItem('agentbox.who');
    showWho();
    toast('The server no longer accepts the token: log in again', true);
    show();
  }
});
window.addEventListener('hashchange', show);
showWho();
show();
