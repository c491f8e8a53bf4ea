// playground.mjs - the code runner (FastGPT's code sandbox shape): POST
// /sandbox/python or /sandbox/js with {code, variables}, answered
// {success, data: {codeReturn, log}} or {success: false, message}.
import {api, ApiError} from './api.mjs';
import {errText} from './app.mjs';
import {field, fill, h} from './dom.mjs';

const SAMPLES = {
  python: 'def main(a, b):\n    print("adding", a, b)\n    return {"sum": a + b}\n',
  js: 'function main({a, b}) {\n  console.log("adding", a, b);\n  return {sum: a + b};\n}\n',
};

export async function render(main, args, signal) {
  const lang = h('select', {name: 'lang', id: 'pg-lang'}, h('option', {value: 'python'}, 'Python'), h('option', {value: 'js'}, 'JavaScript'));
  const code = h('textarea', {name: 'code', id: 'pg-code', rows: 12, spellcheck: 'false', class: 'code'});
  const vars = h('textarea', {name: 'variables', id: 'pg-vars', rows: 3, spellcheck: 'false', class: 'code'});
  const runBtn = h('button', {type: 'submit', id: 'pg-run'}, 'Run');
  const result = h('div', {class: 'result', id: 'pg-result', 'aria-live': 'polite'});
  code.value = SAMPLES.python;
  vars.value = '{"a": 1, "b": 2}';
  lang.addEventListener('change', () => {
    if (Object.values(SAMPLES).includes(code.value)) code.value = SAMPLES[lang.value];
  });
  code.addEventListener('keydown', ev => {
    if (ev.key === 'Enter' && (ev.ctrlKey || ev.metaKey)) { ev.preventDefault(); form.requestSubmit(); }
  });
  const form = h('form', {class: 'playground'},
    field('Language', lang), field('Code (main() is called; Ctrl+Enter runs)', code),
    field('Variables (JSON)', vars), runBtn);
  form.addEventListener('submit', async ev => {
    ev.preventDefault();
    let variables;
    try { variables = vars.value.trim() ? JSON.parse(vars.value) : {}; } catch (e) {
      fill(result, h('p', {class: 'error', role: 'alert'}, 'Variables are not JSON: ' + e.message));
      return;
    }
    runBtn.disabled = true;
    fill(result, h('p', {class: 'muted'}, 'Running…'));
    const t0 = performance.now();
    let j;
    try {
      j = await api('POST', '/sandbox/' + lang.value, {json: {code: code.value, variables}, signal});
    } catch (e) {
      j = e instanceof ApiError && e.body && e.body.success === false ? e.body : null;
      if (!j) { fill(result, h('p', {class: 'error', role: 'alert'}, errText(e))); runBtn.disabled = false; return; }
    }
    runBtn.disabled = false;
    const ms = Math.round(performance.now() - t0);
    if (j.success) {
      fill(result,
        h('p', {class: 'ok'}, 'Success in ' + ms + ' ms'),
        h('h3', {}, 'codeReturn'), h('pre', {class: 'text', id: 'pg-return'}, JSON.stringify(j.data.codeReturn, null, 2)),
        h('h3', {}, 'log'), h('pre', {class: 'text', id: 'pg-log'}, j.data.log || ''));
    } else {
      fill(result, h('p', {class: 'bad', role: 'alert', id: 'pg-error'}, 'Failed: ' + j.message));
    }
  });
  main.append(h('h1', {}, 'Code runner'),
    h('p', {class: 'muted'}, 'Runs a snippet in the server\'s code runner, as FastGPT\'s code sandbox does (POST /sandbox/python, /sandbox/js).'),
    form, result);
}
