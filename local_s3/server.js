// A local S3-compatible server (s3rver) that checks SigV4 signatures and presigned-URL expiry.
// Listens on 127.0.0.1 only. Configured by environment variables:
//   S3_PORT (default 9000), S3_DATA_DIR (default ../var/s3), S3_BUCKET (default "marketplace"),
//   AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY (default "local-key" / "local-secret"),
//   S3_KEEP_CHECKSUMS=1: verify, keep and return SHA-256 checksums as AWS S3 does
//   (checksums.js); by default, like s3rver itself, checksums are neither verified nor kept.
// Prints "ready <port>" on stdout once it accepts connections.
'use strict';

const path = require('path');
const fs = require('fs');
const S3rver = require('@20minutes/s3rver');
const { DUMMY_ACCOUNT } = require('@20minutes/s3rver/lib/models/account');
const { keepChecksums } = require('./checksums');

const port = Number(process.env.S3_PORT || 9000);
const directory = path.resolve(process.env.S3_DATA_DIR || path.join(__dirname, '..', 'var', 's3'));
const bucket = process.env.S3_BUCKET || 'marketplace';
const accessKey = process.env.AWS_ACCESS_KEY_ID || 'local-key';
const secretKey = process.env.AWS_SECRET_ACCESS_KEY || 'local-secret';

fs.mkdirSync(directory, { recursive: true });
DUMMY_ACCOUNT.createKeyPair(accessKey, secretKey);

const server = new S3rver({
  port,
  address: '127.0.0.1',
  directory,
  silent: true,
  vhostBuckets: false,
  configureBuckets: [{ name: bucket }],
});

if (process.env.S3_KEEP_CHECKSUMS === '1') {
  // after the request logger, before s3rver's XML encoding and routes
  server.middleware.splice(1, 0, keepChecksums(server));
}

server.run().then(
  (address) => {
    process.stdout.write(`ready ${address.port}\n`);
  },
  (err) => {
    process.stderr.write(`local S3 server failed to start: ${err.stack || err}\n`);
    process.exit(1);
  },
);

for (const sig of ['SIGINT', 'SIGTERM']) {
  process.on(sig, () => server.close().finally(() => process.exit(0)));
}
