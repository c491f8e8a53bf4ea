// skills.mjs - the server's skills: list (GET /v1/skills), upload a zip
// (validated first with POST /v1/skills/{name}/validate, the report shown,
// then installed with PUT), delete. Installing and deleting need the admin
// token; an API key sees the list and can validate.
import {api} from './api.mjs';
import {errText} from './app.mjs';
import {field, fill, h, toast} from './dom.mjs';

export async function render(main, args, signal) {
  const tbody = h('tbody');
  const name = h('input', {name: 'name', required: true, pattern: '[a-z0-9][a-z0-9-]*', spellcheck: 'false'});
  const file = h('input', {type: 'file', name: 'archive', accept: '.zip,.tar,.tgz,.tar.gz,application/zip', required: true});
  const report = h('div', {class: 'report', id: 'skill-report', 'aria-live': 'polite'});
  const validateBtn = h('button', {type: 'button', id: 'skill-validate', on: {click: () => send(false)}}, 'Validate');
  const installBtn = h('button', {type: 'submit', id: 'skill-install'}, 'Install');
  const form = h('form', {class: 'skill-upload', 'aria-labelledby': 'up-title'},
    h('h2', {id: 'up-title'}, 'Upload a skill'),
    h('p', {class: 'muted'}, 'A zip or tar with SKILL.md (frontmatter: name, description) at its top or in one top folder. Boxes see skills read-only at /mnt/skills/NAME.'),
    h('div', {class: 'row'}, field('Name', name), field('Archive', file)),
    h('div', {class: 'actions'}, validateBtn, installBtn), report);
  file.addEventListener('change', () => {
    if (!name.value && file.files[0]) name.value = file.files[0].name.replace(/\.(zip|tar|tgz|tar\.gz)$/i, '').toLowerCase();
  });
  form.addEventListener('submit', ev => { ev.preventDefault(); send(true); });

  async function send(install) {
    if (!form.reportValidity()) return;
    const n = name.value.trim();
    const path = '/v1/skills/' + encodeURIComponent(n) + (install ? '' : '/validate');
    fill(report, h('p', {class: 'muted'}, install ? 'Installing…' : 'Validating…'));
    let j, err = null;
    try {
      j = await api(install ? 'PUT' : 'POST', path, {body: file.files[0], signal,
                    headers: {'Content-Type': 'application/octet-stream'}});
    } catch (e) {
      err = e;
      j = e.body;
    }
    showReport(n, j, err, install);
    if (install && !err) { toast('Installed ' + n); list(); }
  }

  function showReport(n, j, err, install) {
    const out = [];
    if (j && typeof j.valid === 'boolean') {
      out.push(h('p', {class: j.valid ? 'ok' : 'bad', id: 'skill-valid'},
        j.valid ? (install ? 'Installed: ' : 'Valid: ') + n : 'Not valid: ' + n));
      for (const [label, items, cls] of [['Errors', j.errors, 'bad'], ['Warnings', j.warnings, 'warn']]) {
        if (items && items.length)
          out.push(h('h3', {}, label), h('ul', {class: cls}, items.map(x => h('li', {}, typeof x === 'string' ? x : JSON.stringify(x)))));
      }
    }
    if (err) out.push(h('p', {class: 'error', role: 'alert'}, errText(err)));
    fill(report, out);
  }

  async function list() {
    try {
      const j = await api('GET', '/v1/skills', {signal});
      fill(tbody, j.skills.length ? j.skills.map(s => h('tr', {'data-name': s.name},
        h('td', {}, h('strong', {}, s.name)),
        h('td', {}, s.description),
        h('td', {}, [s.has_scripts && 'scripts', s.has_templates && 'templates', s.has_references && 'references'].filter(Boolean).join(', ') || '–'),
        h('td', {}, h('code', {}, s.path)),
        h('td', {}, h('button', {type: 'button', class: 'small danger', 'aria-label': 'Delete skill ' + s.name,
                                 on: {click: () => remove(s.name)}}, 'Delete')))) :
        h('tr', h('td', {colspan: 5, class: 'muted'}, 'No skills installed.')));
    } catch (e) {
      fill(tbody, h('tr', h('td', {colspan: 5, class: 'error'}, errText(e))));
    }
  }
  async function remove(n) {
    if (!confirm('Delete skill ' + n + '? Boxes lose it at once.')) return;
    try {
      await api('DELETE', '/v1/skills/' + encodeURIComponent(n), {signal});
      toast('Deleted ' + n);
      list();
    } catch (e) { toast(errText(e), true); }
  }

  main.append(h('h1', {}, 'Skills'),
    h('table', {class: 'list', id: 'skills'},
      h('thead', h('tr', ['Name', 'Description', 'Has', 'Path', ''].map(t => h('th', {scope: 'col'}, t)))), tbody),
    form);
  await list();
}
