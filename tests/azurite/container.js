// Creates the test's container in Azurite if it is missing and prints the
// names of its blobs as a JSON array: tests/it/captures_buckets.rs reads the
// bucket with Azure's own SDK rather than with probity's code.
// Usage: node container.js <blob endpoint URL> <container>
"use strict";
const { BlobServiceClient, StorageSharedKeyCredential } = require("@azure/storage-blob");

// Azurite's one account and its well-known key (public, documented).
const ACCOUNT = "devstoreaccount1";
const KEY =
  "Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq/K1SZFPTOtr/KBHBeksoGMGw==";

async function main([endpoint, name]) {
  const credential = new StorageSharedKeyCredential(ACCOUNT, KEY);
  const service = new BlobServiceClient(`${endpoint}/${ACCOUNT}`, credential);
  const container = service.getContainerClient(name);
  await container.createIfNotExists();
  const names = [];
  for await (const blob of container.listBlobsFlat()) names.push(blob.name);
  process.stdout.write(JSON.stringify(names));
}

main(process.argv.slice(2)).catch((error) => {
  process.stderr.write(`${error.message}\n`);
  process.exit(1);
});
