// A Node.js RM on @grpc/grpc-js: registers, streams its nodes, is refused when it names another RM, then
// sends an application and its ask back to back on korral's ordered stream (UpdateInOrder).
// Usage: node si_client.js PROTO_DIR HOST:PORT [TOKEN]; prints one JSON line.
const path = require("path");
const grpc = require("@grpc/grpc-js");
const loader = require("@grpc/proto-loader");

const [protoDir, address, token] = process.argv.slice(2);
const definition = loader.loadSync(path.join(protoDir, "si.proto"), {
  keepCase: true, enums: String, longs: Number, defaults: true, includeDirs: [protoDir],
});
const si = grpc.loadPackageDefinition(definition).si.v1;
const client = new si.Scheduler(address, grpc.credentials.createInsecure());
const metadata = new grpc.Metadata();
if (token) metadata.set("authorization", "Bearer " + token);
const config = "partitions:\n  - name: default\n    queues:\n      - name: root\n        submitacl: '*'\n" +
  "        queues:\n          - name: a\n";
const result = {};

function node(rmID, nodeID) {
  return { rmID, nodes: [{ nodeID, action: "CREATE",
    schedulableResource: { resources: { memory: { value: 1000 } } } }] };
}

function finish() {
  console.log(JSON.stringify(result));
  client.close();
}

// no waiting for the application's acceptance: on one ordered stream the core takes them in this order
function inOrder() {
  const stream = client.UpdateInOrder(metadata);
  result.ordered = [];
  stream.on("data", (response) => {
    result.ordered.push(["application", "allocation", "node"].find((kind) => response[kind]));
    if (response.allocation && response.allocation.new.length) {
      result.allocated = response.allocation.new.map((a) => a.allocationKey);
      result.rejectedAsks = response.allocation.rejected.length;
      stream.cancel();
      finish();
    }
  });
  stream.on("error", (error) => {
    if (error.code !== grpc.status.CANCELLED) {
      result.orderedError = { code: grpc.status[error.code], details: error.details };
      finish();
    }
  });
  stream.write({ application: { rmID: "js-a", new: [
    { applicationID: "js-app", queueName: "root.a", ugi: { user: "js" } }] } });
  stream.write({ allocation: { rmID: "js-a", asks: [{ allocationKey: "k1", applicationID: "js-app",
    resourceAsk: { resources: { memory: { value: 100 } } }, maxAllocations: 1 }] } });
}

client.RegisterResourceManager({ rmID: "js-a", config, policyGroup: "queues" }, metadata, (error) => {
  if (error) {
    result.register = { code: error.code, details: error.details };
    return finish();
  }
  result.register = "ok";
  const stream = client.UpdateNode(metadata);
  stream.on("data", (response) => {
    result.accepted = (result.accepted || []).concat(response.accepted.map((n) => n.nodeID));
    stream.write(node("js-b", "stolen"));  // the same stream now names another RM
  });
  stream.on("error", (error) => {
    result.refused = { code: grpc.status[error.code], details: error.details };
    inOrder();
  });
  stream.write(node("js-a", "n1"));
});
