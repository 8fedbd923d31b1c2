// Evaluates every query of deploy/grafana/tandem.json and every rule of
// deploy/prometheus/rules.yaml through a live Prometheus's HTTP API and
// fails unless each returns data. Dashboard variables become "match all"
// ($instance) and a 30 s window ($__rate_interval); an alert's threshold
// comparison gets `bool`, so its expression returns a series whether or
// not it fires. Recorded series are queried by name too.
// Usage: node prometheus_queries.mjs http://HOST:PORT
import fs from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import YAML from 'yaml';

const here = path.dirname(fileURLToPath(import.meta.url));
const root = path.resolve(here, '..', '..');
const base = process.argv[2];

const queries = [];
const dashboard = JSON.parse(fs.readFileSync(path.join(root, 'deploy/grafana/tandem.json'), 'utf8'));
for (const panel of dashboard.panels) {
  for (const t of panel.targets ?? []) {
    const expr = t.expr.replaceAll('$instance', '.*').replaceAll('$__rate_interval', '30s');
    queries.push({ what: `panel "${panel.title}" ${t.refId}`, expr });
  }
}
const rules = YAML.parse(fs.readFileSync(path.join(root, 'deploy/prometheus/rules.yaml'), 'utf8'));
for (const group of rules.groups) {
  for (const r of group.rules) {
    if (r.record) {
      queries.push({ what: `rule ${r.record}`, expr: r.expr });
      queries.push({ what: `recorded ${r.record}`, expr: r.record });
    } else {
      const expr = r.expr.replace(/\s*(>|<|==|!=|>=|<=)\s*([0-9.e+-]+)\s*$/, ' $1 bool $2');
      if (expr === r.expr) throw new Error(`alert ${r.alert}: no threshold comparison to relax`);
      queries.push({ what: `alert ${r.alert}`, expr });
    }
  }
}

// Scrapes and rule evaluations run every second: a query with no data yet
// is asked again until it has some or a minute has passed.
async function count(expr) {
  const url = `${base}/api/v1/query?query=${encodeURIComponent(expr)}`;
  const body = await (await fetch(url)).json();
  if (body.status !== 'success') throw new Error(`${expr}: ${body.error}`);
  return body.data.result.length;
}
const deadline = Date.now() + 60_000;
let pending = queries;
while (pending.length > 0 && Date.now() < deadline) {
  const still = [];
  for (const q of pending) {
    const n = await count(q.expr);
    if (n > 0) console.log(`ok   ${q.what}: ${n} series`);
    else still.push(q);
  }
  pending = still;
  if (pending.length > 0) await new Promise((r) => setTimeout(r, 500));
}
for (const q of pending) console.log(`FAIL ${q.what}: no data\n     ${q.expr}`);
console.log(`${queries.length - pending.length}/${queries.length} queries returned data`);
process.exit(pending.length === 0 ? 0 : 1);
