// E2B's account `user` and its sudo (docs/compat-e2b.md, "Users"), driven
// by E2B's JS SDK (E2B_SDK_MODULE: "e2b" = 2.51.0, "e2b-2.45.0" = 2.45.0),
// pointed at the server by E2B_API_URL, E2B_SANDBOX_URL and E2B_API_KEY
// (set by tests/integration/test_e2b_user.py). Prints TAP.
//
//   node user.mjs
import { finish, ok, step, thrown } from './tap.mjs';

const sdkName = process.env.E2B_SDK_MODULE || 'e2b';
const { Sandbox } = await import(sdkName);

const sbx = await step('Sandbox.create', () => Sandbox.create({ timeoutMs: 600_000 }));
if (!sbx) {
  console.log('Bail out! no sandbox');
  process.exit(1);
}

// commands.run that returns the result, also of a command that failed
async function run(cmd, opts) {
  try {
    return await sbx.commands.run(cmd, opts);
  } catch (e) {
    if (e && e.exitCode !== undefined) return e;
    throw e;
  }
}

await step('the default user', async () => {
  ok((await run('whoami')).stdout === 'user\n', 'whoami: user');
  // E2B's uid 1000 when the image has it free, else the first free one
  const idu = await run("id -u; awk -F: '$3 == 1000 && $1 != \"user\"' /etc/passwd | wc -l; " +
    "awk -F: '$3 >= 1000 && $3 < 60000 && $1 != \"user\" {print $3}' /etc/passwd /etc/group | sort -n | uniq");
  const [uid, taken, ...used] = idu.stdout.trim().split('\n');
  let want = 1000;
  while (used.includes(String(want))) want++;
  ok(uid === String(want) && (taken !== '0' || uid === '1000'), `id -u: 1000, or the first free uid (${want})`, idu.stdout);
  const r = await run('echo "$HOME $USER"; pwd; id -gn');
  ok(r.stdout === '/home/user user\n/home/user\nuser\n', 'HOME, USER, cwd and group: /home/user, user', r.stdout);
  const l = await run('stat -c "%F %U %G" /home/user');
  ok(l.stdout === 'directory user user\n', '/home/user is a directory of user\'s own (not a link)', l.stdout);
  const t = await run('touch mine && stat -c %U mine');
  ok(t.stdout === 'user\n', 'what a command makes is user\'s', t);
  const d = await run('touch /etc/nope');
  ok(d.exitCode !== 0 && /denied/i.test(d.stderr), 'user cannot write /etc', d);
});

await step('root on request', async () => {
  const r = await run('whoami; echo "$HOME $USER"; pwd', { user: 'root' });
  ok(r.stdout === 'root\n/root root\n/root\n', 'user: root runs as root in /root', r.stdout);
});

await step('files as user', async () => {
  const w = await sbx.files.write('x', 'hello');
  ok(w.path === '/home/user/x', 'files.write("x"): /home/user/x', w);
  const info = await sbx.files.getInfo('x');
  ok(info.owner === 'user' && info.group === 'user' && info.path === '/home/user/x',
    'getInfo: owner and group user, path /home/user/x', info);
  await sbx.files.write('deep/er/y.txt', 'y');
  const deep = await sbx.files.getInfo('deep');
  const deeper = await sbx.files.getInfo('deep/er');
  ok(deep.owner === 'user' && deeper.owner === 'user', 'the folders a write makes are user\'s too', [deep, deeper]);
  await sbx.files.makeDir('made/sub');
  const made = await sbx.files.getInfo('made');
  const sub = await sbx.files.getInfo('made/sub');
  ok(made.owner === 'user' && sub.owner === 'user', 'makeDir: user\'s folders', [made, sub]);
  ok((await run('cat x; echo; ls made')).stdout === 'hello\nsub\n', 'commands see them in their cwd');
  const listed = (await sbx.files.list('.')).find((e) => e.name === 'x');
  ok(listed && listed.owner === 'user' && listed.path === '/home/user/x', 'files.list shows them as user\'s', listed);
  await sbx.files.write('/tmp/as-root.txt', 'r', { user: 'root' });
  ok((await sbx.files.getInfo('/tmp/as-root.txt')).owner === 'root', 'files.write with user: root is root\'s');
  await sbx.files.write('/tmp/by-nobody.txt', 'n', { user: 'nobody' });
  ok((await sbx.files.getInfo('/tmp/by-nobody.txt')).owner === 'nobody', 'files.write with user: nobody is nobody\'s');
  const unknown = await thrown(() => sbx.files.write('/tmp/by-ghost.txt', 'g', { user: 'ghost' }));
  const ghost = await thrown(() => sbx.files.getInfo('/tmp/by-ghost.txt'));
  ok(unknown && /ghost/.test(unknown.message) && ghost, 'a user the box does not have: refused, nothing written',
    [unknown && unknown.message, ghost && ghost.message]);
  const e = await thrown(() => sbx.files.write('/etc/x.txt', 'no'));
  ok(e === null || /denied|permission/i.test(e.message), 'a write is allowed or refused, never a crash', e && e.message);
});

// E2B's envd resolves a relative path, "~" and "~/..." in the home of the
// call's user (permissions.ExpandAndResolve): root's are in /root.
await step('relative paths and ~ are the user\'s home', async () => {
  const w = await sbx.files.write('rel-root.txt', 'r', { user: 'root' });
  ok(w.path === '/root/rel-root.txt', 'files.write("rel-root.txt", user root): /root/rel-root.txt', w);
  ok((await run('cat /root/rel-root.txt', { user: 'root' })).stdout === 'r', 'the file is in /root');
  ok((await sbx.files.read('rel-root.txt', { user: 'root' })) === 'r', 'files.read of the relative path as root');
  ok(!(await sbx.files.exists('rel-root.txt')), 'the same relative path as user is in /home/user: not there');
  ok((await sbx.files.read('~/x')) === 'hello', 'files.read("~/x") as user: /home/user/x');
  const home = await sbx.files.getInfo('~', { user: 'root' });
  ok(home.path === '/root' && home.type === 'dir', 'getInfo("~") as root: /root', home);
  ok((await sbx.files.list('~')).some((e) => e.path === '/home/user/x'), 'files.list("~") as user: /home/user');
  const mv = await sbx.files.rename('~/rel-mv.txt', '/tmp/moved.txt').catch((e) => e);
  ok(mv instanceof Error, 'rename of a missing ~/ path: an error', mv);
  await sbx.files.write('~/mv-src.txt', 'm');
  const moved = await sbx.files.rename('~/mv-src.txt', 'mv-dst.txt');
  ok(moved.path === '/home/user/mv-dst.txt', 'rename("~/a", "b"): both in /home/user', moved);
  const other = await thrown(() => sbx.files.read('~ghost/x'));
  ok(other && /home/.test(other.message), "~name (another user's home): refused", other && other.message);
  const pwd = await run('pwd', { user: 'root', cwd: '~' });
  ok(pwd.stdout === '/root\n', 'commands.run with cwd "~" as root: /root', pwd);
});

await step('sudo', async () => {
  ok((await run('sudo whoami')).stdout === 'root\n', 'sudo whoami: root');
  ok((await run('sudo -u root id -u')).stdout === '0\n', 'sudo -u root id -u: 0');
  ok((await run('sudo -u user id -un')).stdout === 'user\n', 'sudo -u user: user');
  ok((await run('sudo -- whoami')).stdout === 'root\n', 'sudo -- whoami: root');
  ok((await run('sudo -n true')).exitCode === 0, 'sudo -n true: 0');
  ok((await run('sudo -v')).exitCode === 0 && (await run('sudo -k')).exitCode === 0, 'sudo -v, sudo -k: 0');
  const sh = await run("sudo sh -c 'echo \"$SUDO_USER $(id -u) $HOME\"; pwd'");
  ok(sh.stdout === 'user 0 /root\n/home/user\n', "sudo sh -c '...': root, SUDO_USER, cwd kept", sh.stdout);
  const env = await run('sudo env | grep -c ^KEEPME= ; sudo -E env | grep ^KEEPME=', { envs: { KEEPME: 'yes' } });
  ok(env.stdout === '0\nKEEPME=yes\n', 'the environment is reset, -E keeps it', env.stdout);
  ok((await run('sudo -i pwd')).stdout === '/root\n', 'sudo -i: in root\'s home');
  ok((await run('sudo -s id -u')).stdout === '0\n', 'sudo -s: a root shell');
  ok((await run('echo piped | sudo cat')).stdout === 'piped\n', 'stdin reaches the command');
  const err = await run('sudo sh -c "echo oops >&2; exit 7"');
  ok(err.exitCode === 7 && err.stderr === 'oops\n', 'exit status and stderr come back', err);
  const bad = await run('sudo -x true');
  ok(bad.exitCode === 1 && /invalid option/.test(bad.stderr) && /usage: sudo/.test(bad.stderr),
    'an unknown option: sudo\'s error and usage', bad);
  const nf = await run('sudo no-such-command-here');
  ok(nf.exitCode === 1 && /command not found/.test(nf.stderr), 'a missing command: command not found', nf);
  ok((await run('sudo touch /etc/by-sudo && stat -c %U /etc/by-sudo')).stdout === 'root\n',
    'sudo can write where user cannot');
  const sig = await run("sudo sh -c 'kill -TERM $$'");
  ok(sig.exitCode === 143 || sig.exitCode === -1 || sig.exitCode === 128 + 15, 'a command killed by a signal: sudo dies of it', sig);
});

await step('signals reach the command', async () => {
  const r = await run("sudo sh -c 'trap \"echo got-term; exit 3\" TERM; sleep 30 & wait' & p=$!; sleep 0.5; " +
    "kill -TERM $p; wait $p; echo \"status $?\"", { timeoutMs: 20_000 });
  ok(r.stdout === 'got-term\nstatus 3\n', 'a TERM sent to sudo reaches its command, and sudo exits as it did', r);
});

await step('sudo ends with its caller', async () => {
  const h = await sbx.commands.run('sudo sleep 471', { background: true });
  await new Promise((res) => setTimeout(res, 500));
  await h.kill();
  let left = '1';
  for (let i = 0; i < 20 && left !== '0'; i++) {
    await new Promise((res) => setTimeout(res, 200));
    left = (await run("cat /proc/[0-9]*/cmdline 2>/dev/null | tr '\\0' ' ' | grep -c 'sleep 47[1]' || true")).stdout.trim();
  }
  ok(left === '0', 'killing the command that ran sudo kills what sudo started', left);
});

await step('sudo in a terminal', async () => {
  const chunks = [];
  const dec = new TextDecoder();
  const term = await sbx.pty.create({ cols: 100, rows: 30, onData: (d) => chunks.push(dec.decode(d)) });
  const send = (t) => sbx.pty.sendInput(term.pid, new TextEncoder().encode(t));
  const until = async (re) => {
    for (let i = 0; i < 150 && !re.test(chunks.join('')); i++) await new Promise((res) => setTimeout(res, 100));
    return re.test(chunks.join(''));
  };
  await send('sudo -s\n');
  await until(/root@/);
  await send('echo "in-$(id -u)-$([ -t 0 ] && echo tty)-$(ps -o stat= -p $$ | tr -d " ")"\n');
  await until(/in-0-/);
  await send('stty size\n');
  await until(/[\r\n]30 100/);
  await send('exit\n');
  await until(/exit[\s\S]*user@/); // what is typed before sudo is over may be lost, as with sudo
  await send('echo "out-$(id -u)"\n');
  await until(/out-[1-9]/);
  const text = chunks.join('');
  ok(/in-0-tty-\S*\+/.test(text) && /out-[1-9]/.test(text),
    'sudo -s in a PTY: a root shell in the foreground of a terminal of its own, then user again', text.slice(-600));
  ok(!/no job control/.test(text), 'with job control (the terminal is the shell\'s controlling one)', text.slice(-600));
  ok(/[\r\n]30 100/.test(text), 'the terminal has the caller\'s size', text.slice(-600));
  await sbx.pty.kill(term.pid);
});

// a box made before E2B's account (its /home/user a link to /workspace):
// E2B calls run as root there, as they did
if (process.env.LEGACY_BOX) {
  await step('an older box', async () => {
    const old = await Sandbox.connect(process.env.LEGACY_BOX);
    const r = await old.commands.run('whoami; echo "$HOME"; pwd');
    ok(r.stdout === 'root\n/home/user\n/home/user\n', 'commands run as root in /home/user', r.stdout);
    const w = await old.files.write('legacy.txt', 'old');
    const seen = await old.commands.run('cat /workspace/legacy.txt; stat -c %U /workspace/legacy.txt');
    ok(w.path === '/home/user/legacy.txt' && seen.stdout === 'oldroot\n', 'files land in /workspace through the link, root\'s',
      [w, seen.stdout]);
  });
}

await sbx.kill();
finish();
