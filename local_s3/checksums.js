// The checksum-keeping mode of the local S3 server (S3_KEEP_CHECKSUMS=1): what AWS S3 does
// with SHA-256 checksums and s3rver 4.0.4 does not, so that tests and benchmarks exercise the
// platform's single-pass QA over HTTP with real signatures.
//
//   PutObject / UploadPart with x-amz-checksum-sha256: the body is hashed before s3rver sees
//     it; another digest -> 400 BadDigest and nothing is stored. The checksum is kept.
//   CreateMultipartUpload with x-amz-checksum-algorithm: SHA256: every part must carry
//     x-amz-checksum-sha256 (400 InvalidRequest without), and CompleteMultipartUpload must
//     name each part's ChecksumSHA256, equal to the one kept (400 InvalidPart otherwise).
//     The object's checksum is then the composite "<base64 sha256 of the part digests>-<N>".
//   HeadObject / GetObject (whole object) with x-amz-checksum-mode: ENABLED answer
//     x-amz-checksum-sha256 (and x-amz-checksum-type FULL_OBJECT or COMPOSITE).
//   CopyObject copies the checksum; DeleteObject and an overwrite without one drop it.
//
// Checksums live in sidecar files next to s3rver's own (they persist across restarts like the
// objects). Bodies are buffered to be hashed first: fine for episode files and parts here.
'use strict';

const crypto = require('crypto');
const fs = require('fs');
const path = require('path');
const { Readable } = require('stream');

const BASE64_SHA256 = /^[A-Za-z0-9+/]{43}=$/;

function s3Error(ctx, status, code, message) {
  ctx.status = status;
  ctx.type = 'application/xml';
  ctx.body =
    '<?xml version="1.0" encoding="UTF-8"?>\n' +
    `<Error><Code>${code}</Code><Message>${message}</Message></Error>`;
}

async function readBody(req) {
  const chunks = [];
  for await (const chunk of req) chunks.push(chunk);
  return Buffer.concat(chunks);
}

function target(ctx) {
  const [, bucket, ...rest] = ctx.path.split('/');
  return { bucket, key: rest.map(decodeURIComponent).join('/') };
}

function readText(file) {
  try {
    return fs.readFileSync(file, 'utf8');
  } catch (err) {
    if (err.code === 'ENOENT') return null;
    throw err;
  }
}

function write(file, text) {
  fs.mkdirSync(path.dirname(file), { recursive: true });
  fs.writeFileSync(file, text);
}

function remove(file) {
  fs.rmSync(file, { force: true });
}

function keepChecksums(server) {
  const store = server.store;
  const objectFile = (bucket, key) => store.getResourcePath(bucket, key, 'checksum-sha256');
  const uploadDir = (bucket, uploadId) =>
    path.join(store.getResourcePath(bucket, undefined, 'uploads'), path.basename(uploadId));

  async function hashedBody(ctx, expected) {
    if (!BASE64_SHA256.test(expected)) {
      s3Error(ctx, 400, 'InvalidRequest', 'Value for x-amz-checksum-sha256 header is invalid.');
      return false;
    }
    const body = await readBody(ctx.req);
    const actual = crypto.createHash('sha256').update(body).digest('base64');
    if (actual !== expected) {
      s3Error(ctx, 400, 'BadDigest', 'The SHA256 you specified did not match the calculated checksum.');
      return false;
    }
    ctx.req = Readable.from([body]); // s3rver reads ctx.req: hand it the verified bytes
    return true;
  }

  async function putObject(ctx, next) {
    const { bucket, key } = target(ctx);
    const given = ctx.get('x-amz-checksum-sha256');
    const source = ctx.get('x-amz-copy-source');
    let sourceChecksum = null;
    if (source) {
      const [srcBucket, ...srcKey] = decodeURIComponent(source.replace(/^\//, '')).split('/');
      sourceChecksum = readText(objectFile(srcBucket, srcKey.join('/')));
    } else if (given && !(await hashedBody(ctx, given))) {
      return;
    }
    await next();
    if (ctx.status !== 200) return;
    const kept = source ? sourceChecksum : given ? `${given}\nFULL_OBJECT` : null;
    if (kept) write(objectFile(bucket, key), kept);
    else remove(objectFile(bucket, key));
  }

  async function uploadPart(ctx, next) {
    const { bucket } = target(ctx);
    const dir = uploadDir(bucket, ctx.query.uploadId);
    const given = ctx.get('x-amz-checksum-sha256');
    if (readText(path.join(dir, 'checksum-algorithm')) === 'SHA256' && !given) {
      s3Error(ctx, 400, 'InvalidRequest', 'The upload was created using a SHA256 checksum: '
        + 'each part must carry x-amz-checksum-sha256.');
      return;
    }
    if (given && !(await hashedBody(ctx, given))) return;
    await next();
    if (ctx.status === 200 && given) {
      write(path.join(dir, `${Number(ctx.query.partNumber)}.checksum-sha256`), given);
    }
  }

  async function createUpload(ctx, next) {
    await next();
    const algorithm = (ctx.get('x-amz-checksum-algorithm') || '').toUpperCase();
    if (ctx.status !== 200 || !algorithm) return;
    const uploadId = /<UploadId>([0-9a-f]+)<\/UploadId>/.exec(String(ctx.body))[1];
    write(path.join(uploadDir(target(ctx).bucket, uploadId), 'checksum-algorithm'), algorithm);
  }

  async function completeUpload(ctx, next) {
    const { bucket, key } = target(ctx);
    const dir = uploadDir(bucket, ctx.query.uploadId);
    const algorithm = readText(path.join(dir, 'checksum-algorithm'));
    if (algorithm !== 'SHA256') {
      await next();
      if (ctx.status === 200) remove(objectFile(bucket, key));
      return;
    }
    const xml = (await readBody(ctx.req)).toString('utf8');
    ctx.req = Readable.from([Buffer.from(xml, 'utf8')]);
    const digests = [];
    for (const [, part] of xml.matchAll(/<Part>([\s\S]*?)<\/Part>/g)) {
      const number = Number((/<PartNumber>(\d+)<\/PartNumber>/.exec(part) || [])[1]);
      const named = (/<ChecksumSHA256>([^<]*)<\/ChecksumSHA256>/.exec(part) || [])[1];
      const kept = readText(path.join(dir, `${number}.checksum-sha256`));
      if (!named || named !== kept) {
        s3Error(ctx, 400, 'InvalidPart', `Part ${number}: its ChecksumSHA256 is missing or `
          + 'is not the checksum of the part uploaded.');
        return;
      }
      digests.push([number, Buffer.from(kept, 'base64')]);
    }
    digests.sort((a, b) => a[0] - b[0]);
    const composite = crypto.createHash('sha256')
      .update(Buffer.concat(digests.map(([, digest]) => digest)))
      .digest('base64');
    await next();
    if (ctx.status === 200) {
      write(objectFile(bucket, key), `${composite}-${digests.length}\nCOMPOSITE`);
    }
  }

  async function readObject(ctx, next) {
    await next();
    const enabled = (ctx.get('x-amz-checksum-mode') || '').toUpperCase() === 'ENABLED';
    if (ctx.status !== 200 || !enabled || ctx.get('range')) return;
    const { bucket, key } = target(ctx);
    const kept = readText(objectFile(bucket, key));
    if (kept) {
      const [checksum, type] = kept.split('\n');
      ctx.set('x-amz-checksum-sha256', checksum);
      ctx.set('x-amz-checksum-type', type);
    }
  }

  async function deleteObject(ctx, next) {
    await next();
    if (ctx.status === 204 || ctx.status === 200) {
      const { bucket, key } = target(ctx);
      remove(objectFile(bucket, key));
    }
  }

  return async function checksums(ctx, next) {
    const { key } = target(ctx);
    if (!key) return next();
    // the operation's own parameters (a presigned URL adds its X-Amz-* signing ones)
    const q = Object.fromEntries(
      Object.entries(ctx.query).filter(([name]) => !name.toLowerCase().startsWith('x-amz-')),
    );
    if (ctx.method === 'PUT' && q.uploadId !== undefined && q.partNumber !== undefined) {
      return uploadPart(ctx, next);
    }
    if (ctx.method === 'PUT' && Object.keys(q).length === 0) return putObject(ctx, next);
    if (ctx.method === 'POST' && q.uploads !== undefined) return createUpload(ctx, next);
    if (ctx.method === 'POST' && q.uploadId !== undefined) return completeUpload(ctx, next);
    if (ctx.method === 'HEAD' || ctx.method === 'GET') return readObject(ctx, next);
    if (ctx.method === 'DELETE' && Object.keys(q).length === 0) return deleteObject(ctx, next);
    return next();
  };
}

module.exports = { keepChecksums };
