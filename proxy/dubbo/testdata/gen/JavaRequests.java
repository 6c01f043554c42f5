// JavaRequests prints Java-shaped Dubbo 2 request frames, one "name<TAB>hex" line each
// (proxy/dubbo/testdata/requests.txt). The body is written call for call as apache/dubbo's
// DubboCodec.encodeRequestData writes it through Hessian2ObjectOutput (writeUTF = writeString,
// writeObject, writeAttachments = writeObject(HashMap)), with Caucho's Hessian2Output, of which
// Dubbo's hessian-lite is a fork (the same wire format for strings, maps, lists and ints).
// The header is ExchangeCodec.encodeRequest's: magic, flags 0xc2 (request, two-way, hessian2).
//
// Run (Debian: apt-get install libhessian-java):
//   javac -cp /usr/share/java/hessian.jar -d /tmp JavaRequests.java && java --add-opens java.base/java.lang=ALL-UNNAMED -cp /usr/share/java/hessian.jar:/tmp JavaRequests
import com.caucho.hessian.io.Hessian2Output;
import java.io.ByteArrayOutputStream;
import java.util.HashMap;
import java.util.Map;

public class JavaRequests {
    static void frame(String name, long id, String dubboVersion, String service, String version, String method,
                      String desc, Object[] args, Map<String, Object> attachments) throws Exception {
        ByteArrayOutputStream bos = new ByteArrayOutputStream();
        Hessian2Output out = new Hessian2Output(bos);
        out.writeString(dubboVersion);
        out.writeString(service);
        out.writeString(version);
        out.writeString(method);
        out.writeString(desc);
        for (Object a : args) {
            out.writeObject(a);
        }
        out.writeObject(attachments);
        out.flush();
        byte[] body = bos.toByteArray();
        StringBuilder sb = new StringBuilder(name).append('\t');
        byte[] h = new byte[16];
        h[0] = (byte) 0xda; h[1] = (byte) 0xbb; h[2] = (byte) 0xc2;
        for (int i = 0; i < 8; i++) h[4 + i] = (byte) (id >>> (56 - 8 * i));
        for (int i = 0; i < 4; i++) h[12 + i] = (byte) (body.length >>> (24 - 8 * i));
        for (byte b : h) sb.append(String.format("%02x", b));
        for (byte b : body) sb.append(String.format("%02x", b));
        System.out.println(sb);
    }

    static Map<String, Object> att(Object... kv) {
        Map<String, Object> m = new HashMap<>();
        for (int i = 0; i < kv.length; i += 2) m.put((String) kv[i], kv[i + 1]);
        return m;
    }

    public static void main(String[] a) throws Exception {
        String greeting = "org.apache.dubbo.demo.GreetingService";
        // Dubbo 2.7: no version (a null VERSION_KEY attachment is written as null), timeout as a string.
        frame("java27_no_version", 1, "2.0.2", greeting, null, "sayHello", "Ljava/lang/String;",
            new Object[]{"world"}, att("path", greeting, "interface", greeting, "timeout", "3000"));
        // Dubbo 3.x: group and version, an Integer timeout, the consumer's application name.
        frame("java3_group_version", 2, "2.0.2", greeting, "1.0.0", "sayHello", "Ljava/lang/String;",
            new Object[]{"world"}, att("path", greeting, "interface", greeting, "version", "1.0.0", "group", "gray",
                "timeout", 3000, "remote.application", "demo-consumer"));
        // Generic call (GenericService.$invoke(method, parameterTypes, args)).
        frame("java_generic_invoke", 3, "2.0.2", greeting, "1.0.0", "$invoke",
            "Ljava/lang/String;[Ljava/lang/String;[Ljava/lang/Object;",
            new Object[]{"sayHello", new String[]{"java.lang.String"}, new Object[]{"world"}},
            att("path", greeting, "interface", greeting, "version", "1.0.0", "generic", "true"));
        // A 10 KB argument: the attachments are still found at the body's end.
        frame("java_big_argument_group", 4, "2.0.2", greeting, null, "sayHello", "Ljava/lang/String;",
            new Object[]{"x".repeat(10240)}, att("path", greeting, "interface", greeting, "group", "blue"));
        // A map argument holding "group": not the request's group (it has none).
        Map<String, String> arg = new HashMap<>();
        arg.put("group", "not-this-one");
        frame("java_map_argument_no_group", 5, "2.0.2", greeting, null, "update", "Ljava/util/Map;",
            new Object[]{arg}, att("path", greeting, "interface", greeting, "timeout", "3000"));
        // The same argument, and the request's own group.
        frame("java_map_argument_group", 6, "2.0.2", greeting, null, "update", "Ljava/util/Map;",
            new Object[]{arg}, att("path", greeting, "interface", greeting, "group", "green"));
        // Non-ASCII names (a Chinese group), written as Java writes UTF-8.
        frame("java_unicode_group", 7, "2.0.2", greeting, "2.0", "sayHello", "", new Object[]{},
            att("path", greeting, "group", "\u7070\u5ea6"));
    }
}
