//! The fencing protocol at the database, without servers: claim with `fence < token`, write
//! with `fence = token`. A stale holder's write is refused even when it lands between a newer
//! holder's read and its write.

use flash_sale::db::{Db, WriteOutcome, sqlite_url};
use flash_sale::invariants::Invariants;
use flash_sale::model::{NewOrder, NewSale, OrderId, SaleId, UserId, now_ms};

fn order(sale: &SaleId, user: &str, token: i64) -> NewOrder {
    NewOrder {
        id: OrderId::generate(),
        sale_id: sale.clone(),
        user_id: UserId::parse(Some(user)).unwrap(),
        fence: token,
        created_at: now_ms(),
    }
}

#[tokio::test]
async fn a_stale_write_between_a_newer_read_and_write_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let db = Db::connect(&sqlite_url(dir.path()), 2).await.unwrap();
    db.migrate().await.unwrap();
    let sale = NewSale {
        sku: "F-1".into(),
        name: "Fenced".into(),
        stock: 5,
        price_cents: 0,
        per_user_limit: None,
        starts_at: None,
        ends_at: None,
    }
    .validate(now_ms())
    .unwrap();
    db.insert_sale(&sale).await.unwrap();
    let id = sale.id.clone();

    // Holder A (token 10) claims and reads 5, then stalls past its lease.
    assert!(db.claim_fence(&id, 10).await.unwrap());
    let seen_by_a = db.sale(&id).await.unwrap().unwrap().stock;
    // Holder B (token 20) claims and reads 5.
    assert!(db.claim_fence(&id, 20).await.unwrap());
    let seen_by_b = db.sale(&id).await.unwrap().unwrap().stock;
    // A wakes up and writes between B's read and B's write: refused, nothing written.
    assert_eq!(
        db.write_purchase(&order(&id, "a", 10), seen_by_a - 1, Some(10))
            .await
            .unwrap(),
        WriteOutcome::Fenced
    );
    // B's write goes through, on the stock it read.
    assert_eq!(
        db.write_purchase(&order(&id, "b", 20), seen_by_b - 1, Some(20))
            .await
            .unwrap(),
        WriteOutcome::Written
    );
    // A stale holder cannot claim back either.
    assert!(!db.claim_fence(&id, 15).await.unwrap());

    let inv = Invariants::check(&db, &id).await.unwrap();
    assert_eq!((inv.sold, inv.stock_left), (1, 4));
    assert!(inv.violations().is_empty(), "{inv:?}");
    db.close().await;
}
