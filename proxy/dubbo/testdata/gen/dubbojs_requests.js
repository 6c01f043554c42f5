// dubbojs_requests.js prints dubbo-js (dubbo2.js) request frames, one "name<TAB>hex" line each
// (proxy/dubbo/testdata/requests.txt). The body is written call for call as apache/dubbo-js's
// DubboRequestEncoder.encodeBody (packages/dubbo-serialization/src/encode-hessian2.ts) writes it,
// with the serializer it uses, hessian.js's EncoderV2: dubboVersion, dubboInterface, version,
// methodName, -1 when isSupportedDubbox, the parameter descriptor from each argument's $class,
// the arguments, then the attachments {path, interface, version || '0.0.0', ...attachments,
// group, timeout, application} as a java.util.HashMap (hessian.js writes it as 'H', keys sorted).
// The header is its encodeHead: magic, flags 0xc2, the request id, the body length.
//
// Run: npm install hessian.js@2.11.0 && node dubbojs_requests.js
const Hessian = require('hessian.js');

function frame(name, id, ctx) {
  const enc = new Hessian.EncoderV2();
  enc.write(ctx.dubboVersion);
  enc.write(ctx.dubboInterface);
  enc.write(ctx.version);
  enc.write(ctx.methodName);
  if (ctx.isSupportedDubbox) enc.write(-1);
  enc.write(ctx.methodArgs.map(a => 'L' + a.$class.replace(/\./g, '/') + ';').join(''));
  for (const a of ctx.methodArgs) enc.write(a);
  const map = { path: ctx.path, interface: ctx.dubboInterface, version: ctx.version || '0.0.0', ...ctx.attachments };
  if (ctx.group) map.group = ctx.group;
  if (ctx.timeout) map.timeout = ctx.timeout;
  if (ctx.application) map.application = ctx.application;
  enc.write({ $class: 'java.util.HashMap', $: map });
  const body = enc.byteBuffer._bytes.slice(0, enc.byteBuffer._offset);
  const head = Buffer.alloc(16);
  head[0] = 0xda; head[1] = 0xbb; head[2] = 0xc2;
  head.writeBigInt64BE(BigInt(id), 4);
  head.writeUInt32BE(body.length, 12);
  console.log(name + '\t' + Buffer.concat([head, body]).toString('hex'));
}

const svc = 'org.apache.dubbo.demo.DemoProvider';
const str = s => ({ $class: 'java.lang.String', $: s });
frame('dubbojs_group_timeout', 11, { dubboVersion: '2.0.2', dubboInterface: svc, path: svc, version: '1.0.0',
  methodName: 'sayHello', methodArgs: [str('world')], group: 'matrix', timeout: 3000, application: 'dubbo-js' });
frame('dubbojs_no_group', 12, { dubboVersion: '2.0.2', dubboInterface: svc, path: svc, version: '',
  methodName: 'echo', methodArgs: [str('hi')], timeout: 10000, application: 'dubbo-js',
  attachments: { traceId: 'a1b2c3' } });
frame('dubbojs_dubbox', 13, { dubboVersion: '2.8.4', dubboInterface: svc, path: svc, version: '1.0.0',
  methodName: 'getUserInfo', methodArgs: [str('u1')], isSupportedDubbox: true, group: 'dubbox', application: 'dubbo-js' });
