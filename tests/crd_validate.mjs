// Validate custom resources against their CRDs' schemas, offline.
//
//   node tests/crd_validate.mjs NODE_MODULES_DIR < objects.json
//
// stdin: a JSON array of KEDA ScaledObjects and Prometheus Operator ServiceMonitors and
// PrometheusRules;
// stdout: a JSON array, per object null (valid) or the validator's message. The models
// (@kubernetes-models/keda, @kubernetes-models/prometheus-operator) are generated from the
// projects' CRDs; `python -m deploy.k8s_tools` installs them into .cache/k8s-tools/node.
import { readFileSync } from "node:fs";
import { join } from "node:path";
import { pathToFileURL } from "node:url";

const modules = process.argv[2];
const load = (pkg) => import(pathToFileURL(join(modules, pkg, "index.js")).href);
const keda = await load("@kubernetes-models/keda/keda.sh/v1alpha1");
const prom = await load("@kubernetes-models/prometheus-operator/monitoring.coreos.com/v1");
const kinds = {
  "keda.sh/v1alpha1/ScaledObject": keda.ScaledObject,
  "monitoring.coreos.com/v1/ServiceMonitor": prom.ServiceMonitor,
  "monitoring.coreos.com/v1/PrometheusRule": prom.PrometheusRule,
};
const objects = JSON.parse(readFileSync(0, "utf8"));
const results = objects.map((obj) => {
  const Model = kinds[`${obj.apiVersion}/${obj.kind}`];
  if (!Model) return `no validator for ${obj.apiVersion} ${obj.kind}`;
  try {
    new Model(obj).validate();
    return null;
  } catch (e) {
    return String(e.message);
  }
});
process.stdout.write(JSON.stringify(results));
