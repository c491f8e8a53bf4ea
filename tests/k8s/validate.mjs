// validate.mjs - check Kubernetes objects against the Kubernetes OpenAPI
// schema, as compiled into the kubernetes-models npm package (its _schemas/
// are the published OpenAPI v2 definitions turned into validators).
//
//   node validate.mjs < objects.json
//
// Reads a JSON array of objects on stdin; prints a JSON array of the invalid
// ones ({kind, name, errors}) and exits 1 if there is any, 0 if none. An
// object whose apiVersion/kind has no schema is invalid too.
import { readFileSync } from "node:fs";

function schemaName(apiVersion, kind) {
  const [group, version] = apiVersion.includes("/") ? apiVersion.split("/") : ["core", apiVersion];
  const cap = (s) => s.charAt(0).toUpperCase() + s.slice(1);
  return `IoK8sApi${cap(group.split(".")[0])}${cap(version)}${kind}`;
}

const objs = JSON.parse(readFileSync(0, "utf8"));
const bad = [];
const cache = new Map();
for (const obj of objs) {
  const name = `${obj?.metadata?.namespace ?? ""}/${obj?.metadata?.name ?? ""}`;
  if (!obj || typeof obj.apiVersion !== "string" || typeof obj.kind !== "string") {
    bad.push({ kind: String(obj?.kind), name, errors: ["no apiVersion/kind"] });
    continue;
  }
  const mod = schemaName(obj.apiVersion, obj.kind);
  if (!cache.has(mod)) {
    try {
      cache.set(mod, (await import(`kubernetes-models/_schemas/${mod}`)).validate);
    } catch (e) {
      cache.set(mod, null);
    }
  }
  const validate = cache.get(mod);
  if (!validate) {
    bad.push({ kind: obj.kind, name, errors: [`no schema for ${obj.apiVersion} ${obj.kind}`] });
    continue;
  }
  if (!validate(obj)) {
    bad.push({
      kind: obj.kind, name,
      errors: validate.errors.map((e) => `${e.instancePath || "/"} ${e.keyword} ${JSON.stringify(e.params)}`),
    });
  }
}
process.stdout.write(JSON.stringify(bad));
process.exit(bad.length ? 1 : 0);
