// CuratorLock - Apache Curator's InterProcessMutex, InterProcessReadWriteLock
// and InterProcessSemaphoreV2 from the command line, for dlock's interop tests
// (tests/integration/test_zk*.c). Compiled at test time with javac against
// Debian's curator and zookeeper jars.
//
//   CuratorLock CONNECT PATH hold SECONDS   acquire (waiting up to 30 s), print
//                                            "ACQUIRED <node>", hold, release, exit 0
//   CuratorLock CONNECT PATH try MILLIS      "ACQUIRED" exit 0, or "BUSY" exit 3
//   readhold, writehold, readtry, writetry   the same with one side of an
//                                            InterProcessReadWriteLock
//   semhold:N, semtry:N                      the same with one lease of an
//                                            InterProcessSemaphoreV2 of N leases
//   CuratorLock CONNECT PATH latch ID:SECONDS
//                                            a LeaderLatch candidate with id ID:
//                                            "STARTED" once its node exists,
//                                            "LEADER" when it leads (within 60 s),
//                                            leads SECONDS, closes, "CLOSED", exit 0
//   CuratorLock CONNECT PATH watch ID:SECONDS
//                                            a LeaderLatch candidate that prints
//                                            "STARTED", then "LEADER"/"NOTLEADER" at
//                                            each change of hasLeadership() (polled
//                                            every 50 ms) for SECONDS, then closes,
//                                            "END LEADER"/"END NOTLEADER", exit 0
//   CuratorLock CONNECT PATH leader          LeaderLatch.getLeader(): "LEADER <id>"
//                                            exit 0, or "NONE" exit 3
//   CuratorLock CONNECT PATH create [user:pass]
//                                            create PATH (and parents) as a plain
//                                            node; with user:pass, readable by all
//                                            but writable only by that digest user
// Exit 2 on any error.
import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.TimeUnit;
import org.apache.curator.framework.CuratorFramework;
import org.apache.curator.framework.CuratorFrameworkFactory;
import org.apache.curator.framework.recipes.leader.LeaderLatch;
import org.apache.curator.framework.recipes.leader.Participant;
import org.apache.curator.framework.recipes.locks.InterProcessLock;
import org.apache.curator.framework.recipes.locks.InterProcessMutex;
import org.apache.curator.framework.recipes.locks.InterProcessReadWriteLock;
import org.apache.curator.framework.recipes.locks.InterProcessSemaphoreV2;
import org.apache.curator.framework.recipes.locks.Lease;
import org.apache.curator.retry.RetryOneTime;
import org.apache.zookeeper.ZooDefs;
import org.apache.zookeeper.data.ACL;
import org.apache.zookeeper.data.Id;
import org.apache.zookeeper.server.auth.DigestAuthenticationProvider;

public class CuratorLock {
  // A LeaderLatch with id 'id' on 'path', started; "STARTED" once its node exists.
  static LeaderLatch startLatch(CuratorFramework client, String path, String id) throws Exception {
    LeaderLatch latch = new LeaderLatch(client, path, id);
    latch.start();
    for (int i = 0; i < 3000 && latch.getOurPath() == null; i++) Thread.sleep(10);
    if (latch.getOurPath() == null) throw new Exception("the latch's node was not created in 30 s");
    System.out.println("STARTED");
    System.out.flush();
    return latch;
  }

  public static void main(String[] args) throws Exception {
    if (args.length < 3) {
      System.err.println("usage: CuratorLock CONNECT PATH hold SECONDS | try MILLIS | create [user:pass]");
      System.exit(2);
    }
    String connect = args[0], path = args[1], mode = args[2];
    CuratorFrameworkFactory.Builder b = CuratorFrameworkFactory.builder()
        .connectString(connect).sessionTimeoutMs(4000).connectionTimeoutMs(5000)
        .retryPolicy(new RetryOneTime(200));
    if (mode.equals("create") && args.length > 3)
      b.authorization("digest", args[3].getBytes(StandardCharsets.UTF_8));
    CuratorFramework client = b.build();
    int status = 2;
    try {
      client.start();
      if (!client.blockUntilConnected(10, TimeUnit.SECONDS)) throw new Exception("no connection to " + connect);
      if (mode.startsWith("sem")) {
        int n = Integer.parseInt(mode.substring(mode.indexOf(':') + 1));
        InterProcessSemaphoreV2 sem = new InterProcessSemaphoreV2(client, path, n);
        boolean hold = mode.startsWith("semhold");
        Lease lease = hold ? sem.acquire(30, TimeUnit.SECONDS)
                           : sem.acquire(Long.parseLong(args[3]), TimeUnit.MILLISECONDS);
        if (lease == null) {
          if (hold) throw new Exception("no lease in 30 s");
          System.out.println("BUSY");
          status = 3;
        } else {
          System.out.println("ACQUIRED");
          System.out.flush();
          if (hold) Thread.sleep((long) (Double.parseDouble(args[3]) * 1000));
          sem.returnLease(lease);
          if (hold) System.out.println("RELEASED");
          status = 0;
        }
      } else if (mode.startsWith("read") || mode.startsWith("write")) {
        InterProcessReadWriteLock rw = new InterProcessReadWriteLock(client, path);
        InterProcessLock m = mode.startsWith("read") ? rw.readLock() : rw.writeLock();
        boolean hold = mode.endsWith("hold");
        boolean got = hold ? m.acquire(30, TimeUnit.SECONDS)
                           : m.acquire(Long.parseLong(args[3]), TimeUnit.MILLISECONDS);
        if (!got) {
          if (hold) throw new Exception("not acquired in 30 s");
          System.out.println("BUSY");
          status = 3;
        } else {
          System.out.println("ACQUIRED");
          System.out.flush();
          if (hold) Thread.sleep((long) (Double.parseDouble(args[3]) * 1000));
          m.release();
          if (hold) System.out.println("RELEASED");
          status = 0;
        }
      } else if (mode.equals("hold")) {
        InterProcessMutex m = new InterProcessMutex(client, path);
        if (!m.acquire(30, TimeUnit.SECONDS)) throw new Exception("not acquired in 30 s");
        System.out.println("ACQUIRED");
        System.out.flush();
        Thread.sleep((long) (Double.parseDouble(args[3]) * 1000));
        m.release();
        System.out.println("RELEASED");
        status = 0;
      } else if (mode.equals("try")) {
        InterProcessMutex m = new InterProcessMutex(client, path);
        if (m.acquire(Long.parseLong(args[3]), TimeUnit.MILLISECONDS)) {
          System.out.println("ACQUIRED");
          m.release();
          status = 0;
        } else {
          System.out.println("BUSY");
          status = 3;
        }
      } else if (mode.equals("latch")) {
        double secs = Double.parseDouble(args[3].substring(args[3].lastIndexOf(':') + 1));
        LeaderLatch latch = startLatch(client, path, args[3].substring(0, args[3].lastIndexOf(':')));
        if (!latch.await(60, TimeUnit.SECONDS)) throw new Exception("not leader in 60 s");
        System.out.println("LEADER");
        System.out.flush();
        Thread.sleep((long) (secs * 1000));
        latch.close();
        System.out.println("CLOSED");
        status = 0;
      } else if (mode.equals("watch")) {
        double secs = Double.parseDouble(args[3].substring(args[3].lastIndexOf(':') + 1));
        LeaderLatch latch = startLatch(client, path, args[3].substring(0, args[3].lastIndexOf(':')));
        boolean was = false;
        long end = System.currentTimeMillis() + (long) (secs * 1000);
        while (System.currentTimeMillis() < end) {
          boolean h = latch.hasLeadership();
          if (h != was) {
            System.out.println(h ? "LEADER" : "NOTLEADER");
            System.out.flush();
            was = h;
          }
          Thread.sleep(50);
        }
        System.out.println(was ? "END LEADER" : "END NOTLEADER");
        latch.close();
        status = 0;
      } else if (mode.equals("leader")) {
        Participant p = new LeaderLatch(client, path).getLeader();
        if (p.getId().isEmpty()) {
          System.out.println("NONE");
          status = 3;
        } else {
          System.out.println("LEADER " + p.getId());
          status = 0;
        }
      } else if (mode.equals("create")) {
        if (args.length > 3) {
          List<ACL> acl = new ArrayList<>();
          String digest = DigestAuthenticationProvider.generateDigest(args[3]);
          acl.add(new ACL(ZooDefs.Perms.ALL, new Id("digest", digest)));
          acl.add(new ACL(ZooDefs.Perms.READ, ZooDefs.Ids.ANYONE_ID_UNSAFE));
          client.create().creatingParentsIfNeeded().withACL(acl).forPath(path);
        } else {
          client.create().creatingParentsIfNeeded().forPath(path);
        }
        System.out.println("CREATED");
        status = 0;
      } else {
        throw new Exception("unknown mode " + mode);
      }
    } catch (Exception e) {
      System.err.println("CuratorLock: " + e);
      status = 2;
    } finally {
      client.close();
    }
    System.out.flush();
    System.exit(status);
  }
}
