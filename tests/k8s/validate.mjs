// validate.mjs - check Kubernetes objects against the Kubernetes OpenAPI
// schema, as compiled into the kubernetes-models npm package (its _schemas/
// are the published OpenAPI v2 definitions turned into validators).
//
//   node validate.mjs < objects.json
//   node validate.mjs --serve       (a JSON object a line in, an answer a line out)
//
// Reads a JSON array of objects on stdin; prints a JSON array of the invalid
// ones ({kind, name, errors}) and exits 1 if there is any, 0 if none. An
// object whose apiVersion/kind has no schema is invalid too.
//
// The compiled validators let unknown fields through (the OpenAPI
// definitions do not forbid them), while a real API server drops them, or
// refuses them under fieldValidation=Strict. So a second pass walks each
// object along the package's type declarations (the .d.ts interfaces, one
// per definition, with its properties and their types) and reports every
// field the schema does not have.
import { existsSync, readFileSync } from "node:fs";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";

const MODULES = join(dirname(fileURLToPath(import.meta.url)), "node_modules");
const interfaces = new Map(); // .d.ts path -> {props: Map(name -> type), imports: Map(name -> path)} | null

// The properties of the interface a .d.ts file declares, or null if it
// declares none (a type alias such as Quantity: not an object).
function parseDts(path) {
  if (interfaces.has(path)) return interfaces.get(path);
  let out = null;
  if (existsSync(path)) {
    const text = readFileSync(path, "utf8").replace(/\/\*[\s\S]*?\*\//g, "");
    const imports = new Map();
    for (const m of text.matchAll(/import \{ (\w+) \} from "([^"]+)";/g)) {
      const spec = m[2].replace(/\.js$/, "");
      imports.set(m[1], spec.startsWith(".") ? join(dirname(path), spec + ".d.ts") : join(MODULES, spec + ".d.ts"));
    }
    const head = text.match(/export interface \w+( extends TypeMeta)? \{/);
    if (head) {
      const props = new Map();
      if (head[1]) {
        props.set("apiVersion", "string");
        props.set("kind", "string");
      }
      let i = head.index + head[0].length;
      for (;;) {
        const m = /^\s*"([^"]+)"\??:\s*|^\s*\}/.exec(text.slice(i));
        if (!m || !m[1]) break;
        i += m[0].length;
        let depth = 0, j = i;
        for (; j < text.length; j++) {
          const ch = text[j];
          if (ch === "{" || ch === "<" || ch === "(") depth++;
          else if (ch === "}" || ch === ">" || ch === ")") depth--;
          else if (ch === ";" && depth === 0) break;
        }
        props.set(m[1], text.slice(i, j).trim());
        i = j + 1;
      }
      out = { props, imports };
    }
  }
  interfaces.set(path, out);
  return out;
}

// Unknown fields of value against a type expression of decl's file: their
// paths (arrays of keys and indexes) pushed on out.
function unknownFields(value, type, decl, path, out) {
  type = type.trim();
  const arr = /^Array<([\s\S]*)>$/.exec(type);
  if (arr) {
    if (Array.isArray(value)) value.forEach((v, k) => unknownFields(v, arr[1], decl, [...path, k], out));
    return;
  }
  const map = /^\{\s*\[key: string\]:\s*([\s\S]*?);?\s*\}$/.exec(type);
  if (map) {
    if (value && typeof value === "object")
      for (const [k, v] of Object.entries(value)) unknownFields(v, map[1], decl, [...path, k], out);
    return;
  }
  if (!/^\w+$/.test(type) || !decl.imports.has(type)) return; // a primitive or a union
  const sub = parseDts(decl.imports.get(type));
  if (sub) checkObject(value, sub, path, out);
}

function checkObject(value, decl, path, out) {
  if (!value || typeof value !== "object" || Array.isArray(value) || decl.props.size === 0) return;
  for (const [k, v] of Object.entries(value)) {
    if (!decl.props.has(k)) out.push([...path, k]);
    else unknownFields(v, decl.props.get(k), decl, [...path, k], out);
  }
}

// A field path as the API server writes it in messages: spec.containers[0].imag
export function fieldPath(path) {
  return path.map((p, i) => (typeof p === "number" ? `[${p}]` : (i ? "." : "") + p)).join("");
}

function topDts(apiVersion, kind) {
  return join(MODULES, "kubernetes-models", ...apiVersion.split("/"), kind + ".d.ts");
}

function schemaName(apiVersion, kind) {
  const [group, version] = apiVersion.includes("/") ? apiVersion.split("/") : ["core", apiVersion];
  const cap = (s) => s.charAt(0).toUpperCase() + s.slice(1);
  return `IoK8sApi${cap(group.split(".")[0])}${cap(version)}${kind}`;
}

const cache = new Map();

// {errors: ["/path keyword params"], typeErrors: [...the "type" ones],
//  unknown: [[key, ...]]} for one object.
async function check(obj) {
  if (!obj || typeof obj.apiVersion !== "string" || typeof obj.kind !== "string")
    return { errors: ["no apiVersion/kind"], typeErrors: [], unknown: [] };
  const mod = schemaName(obj.apiVersion, obj.kind);
  if (!cache.has(mod)) {
    try {
      cache.set(mod, (await import(`kubernetes-models/_schemas/${mod}`)).validate);
    } catch (e) {
      cache.set(mod, null);
    }
  }
  const validate = cache.get(mod);
  if (!validate) return { errors: [`no schema for ${obj.apiVersion} ${obj.kind}`], typeErrors: [], unknown: [] };
  const fails = validate(obj) ? [] : validate.errors;
  const fmt = (e) => `${e.instancePath || "/"} ${e.keyword} ${JSON.stringify(e.params)}`;
  const unknown = [];
  const decl = parseDts(topDts(obj.apiVersion, obj.kind));
  const errors = fails.map(fmt);
  if (!decl) errors.push(`no type declaration for ${obj.apiVersion} ${obj.kind}`);
  else checkObject(obj, decl, [], unknown);
  for (const u of unknown) errors.push(`${fieldPath(u)}: unknown field "${u[u.length - 1]}"`);
  return { errors, typeErrors: fails.filter((e) => e.keyword === "type").map(fmt), unknown };
}

if (process.argv[2] === "--serve") {
  // One JSON object a line in, one answer a line out (the API server's
  // field validation).
  const { createInterface } = await import("node:readline");
  for await (const line of createInterface({ input: process.stdin })) {
    let answer;
    try {
      answer = await check(JSON.parse(line));
    } catch (e) {
      answer = { errors: [String(e)], typeErrors: [], unknown: [] };
    }
    process.stdout.write(JSON.stringify(answer) + "\n");
  }
  process.exit(0);
}

const objs = JSON.parse(readFileSync(0, "utf8"));
const bad = [];
for (const obj of objs) {
  const name = `${obj?.metadata?.namespace ?? ""}/${obj?.metadata?.name ?? ""}`;
  const { errors } = await check(obj);
  if (errors.length) bad.push({ kind: String(obj?.kind), name, errors });
}
process.stdout.write(JSON.stringify(bad));
process.exit(bad.length ? 1 : 0);
